"""Clients of the daemon from outside: raw HTTP, readers of its wire formats, forged tokens, a headless browser."""
