"""The reference engine's streamed completion (`"stream": true`): the request's stream fields checked, and
the events written in the format of vLLM's completion stream, the one the tiny engine writes
(docs/tinyengine.md, "Streaming"; docs/refengine.md, "Streaming"). Pure Python: tested on CI without torch.

One event per generated token; prompt_token_ids on the first chunk only; token_ids ([the token]) only with
return_token_ids; finish_reason "length" on the last token's chunk; the usage event before [DONE] when
stream_options asks for it. The front continues such a stream on the next engine from the token ids it
has read (docs/front.md)."""
import json


def stream_fields(req):
    """(stream, include_usage, return_token_ids) of a completion request, or raises ValueError naming the
    field at fault (the caller answers 400)."""
    stream = req.get("stream", False)
    if not isinstance(stream, bool):
        raise ValueError("stream: true or false")
    opts = req.get("stream_options")
    if opts is not None and not stream:
        raise ValueError("stream_options: only with \"stream\": true")
    if opts is not None and not isinstance(opts, dict):
        raise ValueError("stream_options: an object")
    include = (opts or {}).get("include_usage", opts is not None)
    if not isinstance(include, bool):
        raise ValueError("stream_options.include_usage: true or false")
    ids = req.get("return_token_ids", False)
    if not isinstance(ids, bool):
        raise ValueError("return_token_ids: true or false")
    return stream, include, ids


class CompletionStream:
    """The events of one streamed completion of PROMPT (token ids) that will have max_tokens tokens.
    token_text(t) names a token (the engine's), logprobs says whether each chunk carries its logprob."""

    def __init__(self, cid, created, model, prompt, max_tokens, token_text, return_token_ids=False,
                 include_usage=False, logprobs=False):
        self.cid, self.created, self.model = cid, created, model
        self.prompt, self.max_tokens, self.token_text = list(prompt), max_tokens, token_text
        self.return_token_ids, self.include_usage, self.logprobs = return_token_ids, include_usage, logprobs
        self.sent = 0

    def _event(self, choices, usage):
        body = {"id": self.cid, "object": "text_completion", "created": self.created, "model": self.model,
                "choices": choices, "usage": usage}
        return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\n"

    def token(self, tok, logprob=None):
        """The event of the next generated token."""
        first = self.sent == 0
        self.sent += 1
        choice = {"index": 0, "text": self.token_text(tok),
                  "logprobs": ({"tokens": [self.token_text(tok)], "token_logprobs": [logprob]}
                               if self.logprobs else None),
                  "finish_reason": "length" if self.sent >= self.max_tokens else None, "stop_reason": None,
                  "prompt_token_ids": self.prompt if first else None,
                  "token_ids": [tok] if self.return_token_ids else None}
        return self._event([choice], None)

    def end(self):
        """What follows the last token: the usage event (if asked) and [DONE]."""
        tail = b""
        if self.include_usage:
            n = len(self.prompt)
            tail = self._event([], {"prompt_tokens": n, "total_tokens": n + self.sent,
                                    "completion_tokens": self.sent})
        return tail + b"data: [DONE]\n\n"

    def error(self, message):
        """An error event (the engine failed mid-stream), then [DONE]: vLLM's way of ending such a stream."""
        body = {"error": {"message": message, "type": "internal_server_error", "param": None, "code": 500}}
        return b"data: " + json.dumps(body, separators=(",", ":")).encode() + b"\n\ndata: [DONE]\n\n"


def chunk(data):
    """One HTTP/1.1 chunk of DATA (b"" is the last chunk)."""
    return b"%x\r\n%s\r\n" % (len(data), data)
