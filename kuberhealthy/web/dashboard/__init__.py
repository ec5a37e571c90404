"""`GET /dashboard`: the page for people, its live updates, templates and assets."""
