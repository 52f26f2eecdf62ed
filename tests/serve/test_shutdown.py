"""A real `vaswani serve` process: SIGTERM lets every request in flight finish, then the server exits cleanly."""

from __future__ import annotations

import signal
import threading
import time

import httpx
import pytest


@pytest.mark.slow
def test_sigterm_finishes_the_requests_in_flight(server, test_pairs) -> None:
    answers: list[httpx.Response | Exception] = []
    started = threading.Event()

    def client(text: str) -> None:
        started.set()
        # beam 8 up to 100 tokens, 8 texts: a search far longer than the spread of the six arrivals, even on a
        # loaded machine, so all six are in flight together when SIGTERM comes
        try:
            body = {"texts": [text, text[::-1]] * 4, "beam": 8, "max_len_a": 0.0, "max_len_b": 100}
            answers.append(httpx.post(f"{server.url}/v1/translate", json=body, timeout=60))
        except Exception as error:  # noqa: BLE001 - recorded and asserted below
            answers.append(error)

    threads = [threading.Thread(target=client, args=(text,)) for text in test_pairs[0][:6]]
    for thread in threads:
        thread.start()
    started.wait()
    # SIGTERM once every request has reached the server (a request not yet accepted would rightly be refused):
    # 6 requests x 8 texts, far more search than the few milliseconds the requests take to arrive.
    deadline, in_flight = time.monotonic() + 10, 0
    while in_flight < 6 * 8 and time.monotonic() < deadline:
        in_flight = httpx.get(f"{server.url}/health", timeout=5).json()["in_flight"]
        time.sleep(0.002)
    server.process.send_signal(signal.SIGTERM)
    for thread in threads:
        thread.join(timeout=90)
    log = server.stop()

    assert in_flight == 6 * 8, f"only {in_flight} of 48 sentences were in flight at SIGTERM; the test proves little"
    # uvicorn re-raises the SIGTERM it caught once shutdown is complete, so the exit status says "terminated".
    assert server.process.returncode in (0, -signal.SIGTERM), log
    assert len(answers) == 6
    assert all(isinstance(a, httpx.Response) and a.status_code == 200 for a in answers), answers
    assert all(len(a.json()["translations"]) == 8 for a in answers)
    assert "Finished server process" in log
    with pytest.raises(httpx.TransportError):  # and it is gone
        httpx.get(f"{server.url}/health", timeout=2)
