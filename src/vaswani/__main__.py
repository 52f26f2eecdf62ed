import sys

# A Ctrl-C at any moment of the start-up, even while the command line is still importing or just entering main(),
# is one line and status 130 (vaswani.cli.main handles every later one the same way).
try:
    from vaswani.cli import main

    status = main()
except KeyboardInterrupt:
    print("interrupted", file=sys.stderr)
    status = 130
sys.exit(status)
