"""`python -m gputopo` is the `gputopo` command."""

from gputopo.cli.main import entry

if __name__ == "__main__":
    entry()
