"""`python -m api …`: the `ragbus` command, for a process started without the entry point."""

from api.entry import main

main()
