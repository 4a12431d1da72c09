"""`python -m gputopo` is the `gputopo` command."""

from gputopo.cli.main import main

if __name__ == "__main__":
    main()
