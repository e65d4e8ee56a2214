"""Backups that restore (issue 58): each store's part of a backup, and the manifest that
names every file with its size and checksum."""
