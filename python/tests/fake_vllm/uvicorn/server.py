"""uvicorn.server.Server reduced to Server.startup with `sockets` (encode/uvicorn uvicorn/server.py, 0.35.0,
checked at e6c7ce791fc634b6eedee40e0d0207faa8a9aefd): for each passed socket uvicorn calls
loop.create_server(protocol, sock=sock, ssl=config.ssl, backlog=config.backlog), and asyncio's server start
calls sock.listen(backlog) on it (on Linux that sets the queue length again, replacing the one the socket
had). Then the app is served; here the app is a callable that serves the listening socket and returns."""


class Server:
    def __init__(self, config):
        self.config = config
        self.should_exit = False

    def serve(self, sockets=None):
        if not sockets:
            raise RuntimeError("NOT uvicorn: the reproduction serves passed sockets only (vLLM passes one)")
        if not self.config.loaded:
            self.config.load()
        result = None
        for sock in sockets:
            sock.listen(self.config.backlog)
        for sock in sockets:
            result = self.config.app(sock)
        return result
