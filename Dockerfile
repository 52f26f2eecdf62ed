# `vaswani serve` in a container: one image, run as many replicas as the traffic needs behind a load balancer
# (docs/serving.md, "Several machines"). The checkpoint is mounted, not baked in:
#
#   docker build -t vaswani-serve .
#   docker run -p 8000:8000 -v "$PWD/runs/multi30k-cpu:/model:ro" -v vaswani-cache:/cache --stop-timeout 40 vaswani-serve
#
# Flags after the image name replace the command below, e.g. `vaswani-serve --checkpoint /model --workers 2`.
FROM python:3.11-slim

# The CPU build of torch first, so pip never pulls a CUDA one; torch converts the checkpoint for CTranslate2 once.
RUN pip install --no-cache-dir torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu

WORKDIR /src
COPY pyproject.toml README.md ./
COPY src ./src
# The serve extra (FastAPI, uvicorn) and the export extra's CTranslate2, the engine the server searches on.
RUN pip install --no-cache-dir ".[serve,export]" && useradd --create-home vaswani && mkdir /cache \
    && chown vaswani /cache

# A read-only checkpoint gets its CTranslate2 conversion here; a volume keeps it from one start to the next.
ENV VASWANI_CACHE=/cache PYTHONUNBUFFERED=1
USER vaswani
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --start-period=120s \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/health', timeout=2)"]
# SIGTERM (docker stop) lets the requests in flight finish, up to 30 s: give `docker stop` longer than its 10 s.
ENTRYPOINT ["vaswani", "serve", "--host", "0.0.0.0", "--port", "8000"]
CMD ["--checkpoint", "/model"]
