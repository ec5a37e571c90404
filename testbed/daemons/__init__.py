"""The daemon under test: as users run it (a child process) and wired in the test process."""
