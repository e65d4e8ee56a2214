"""`python -m cli …`: the `ragbus` command, for a process started without the entry point."""

from cli.entry import main

main()
