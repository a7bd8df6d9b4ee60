"""``memories web``: the vault in a browser, served on loopback by a thin client of the daemon (no keys here).

- :mod:`~memories.web.access`: the one-time link token, the sessions it opens and their CSRF tokens.
- :mod:`~memories.web.gate`: the ASGI gate in front of every request (Host, Origin, session, CSRF, headers).
- :mod:`~memories.web.daemon`: the daemon's client protocol, called from the app's event loop.
- :mod:`~memories.web.render`: templates, UI language, Markdown, highlights.
- :mod:`~memories.web.pages`: the pages (search, a note, ask, status) and their actions.
- :mod:`~memories.web.serve`: the command's server (:mod:`memories.serving`'s socket and uvicorn).

Only ``memories web`` imports this package: the CLI's start-up never loads jinja2, markdown-it or nh3.
"""
