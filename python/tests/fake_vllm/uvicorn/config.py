"""uvicorn.config.Config reduced to what a passed socket sees: `backlog` (default 2048, as uvicorn's),
host and port (only named in logs when a socket is passed), and every other keyword kept as given.
encode/uvicorn uvicorn/config.py `Config.__init__` (0.35.0, checked at e6c7ce791fc634b6eedee40e0d0207faa8a9aefd)."""


class Config:
    def __init__(self, app, host="127.0.0.1", port=8000, backlog=2048, **kwargs):
        self.app, self.host, self.port, self.backlog = app, host, port, backlog
        self.kwargs = kwargs
        self.loaded = False

    def load(self):
        self.loaded = True
