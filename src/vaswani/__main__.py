import sys

try:  # a Ctrl-C while the command line is still importing is one line too (vaswani.cli handles every later one)
    from vaswani.cli import main
except KeyboardInterrupt:
    print("interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(main())
