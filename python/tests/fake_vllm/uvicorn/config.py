"""uvicorn.config.Config reduced to what a passed socket sees: `backlog` (default 2048, as uvicorn's),
host and port (only named in logs when a socket is passed), and every other keyword kept as given."""


class Config:
    def __init__(self, app, host="127.0.0.1", port=8000, backlog=2048, **kwargs):
        self.app, self.host, self.port, self.backlog = app, host, port, backlog
        self.kwargs = kwargs
        self.loaded = False

    def load(self):
        self.loaded = True
