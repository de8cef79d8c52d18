"""The one line the loader writes per load: what the supervisor reads (format: docs/vllm-plugin.md).

    fastrestart-loader: v=1 result=hit key=9f1c2b7a0d4e5f61 device=cuda:0 tp=0/1 pp=0/1 dp=0/1 mode=zero_copy
      tensors=291 bytes=16060522496 attach_ms=1.9 load_ms=- publish=- publish_ms=- total_ms=35.2 adopt=-
      adopt_ms=- reason=""

(one line in reality). Fields come in this order, always all of them, `-` where a field does not apply;
`reason` is last and is a JSON string. The line goes straight to file descriptor 2, not through logging:
vLLM's logging can be detached from the real stderr by kernel JIT compilers that swap sys.stderr (vLLM's
own weight-cache daemon writes its readiness line to fd 2 for the same reason).
"""

import dataclasses
import json
import os

__all__ = ["LoadReport", "PREFIX", "RESULTS", "PUBLISH", "ADOPT", "format_line", "parse_line", "emit"]

PREFIX = "fastrestart-loader:"
VERSION = "1"
RESULTS = ("hit", "miss", "fallback", "fail")
PUBLISH = ("ok", "busy", "failed", "skipped", "-")
ADOPT = ("ok", "failed", "-")


@dataclasses.dataclass
class LoadReport:
    """What happened in one load_model call.

    result: hit (attached and bound), miss (the daemon answered without the key: loaded from disk, then
    published), fallback (the daemon was unusable or the warm path failed: loaded from disk), fail (no model:
    fallback is off, or the cold load failed too; the exception follows the line).
    """
    result: str
    key: str = "-"            # the daemon's fingerprint of the key (hit, or after a publish), else "-"
    device: str = "-"
    tp: str = "-"             # "rank/size"
    pp: str = "-"
    dp: str = "-"
    mode: str = "-"
    tensors: int | None = None
    bytes: int | None = None
    attach_ms: float | None = None
    load_ms: float | None = None
    publish: str = "-"
    publish_ms: float | None = None
    total_ms: float | None = None
    adopt: str = "-"          # zero_copy after a publish: ok (serving the daemon's copy, the own one freed), failed
    adopt_ms: float | None = None
    reason: str = ""


_FIELDS = ("key", "device", "tp", "pp", "dp", "mode", "tensors", "bytes", "attach_ms", "load_ms", "publish",
           "publish_ms", "total_ms", "adopt", "adopt_ms")


def _value(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return "%.1f" % v
    s = str(v)
    return s if s and not any(c.isspace() for c in s) else "-"


def format_line(report):
    if report.result not in RESULTS:
        raise ValueError("result: %r is not one of %s" % (report.result, RESULTS))
    if report.publish not in PUBLISH:
        raise ValueError("publish: %r is not one of %s" % (report.publish, PUBLISH))
    if report.adopt not in ADOPT:
        raise ValueError("adopt: %r is not one of %s" % (report.adopt, ADOPT))
    parts = [PREFIX, "v=" + VERSION, "result=" + report.result]
    parts += ["%s=%s" % (f, _value(getattr(report, f))) for f in _FIELDS]
    parts.append("reason=" + json.dumps(report.reason, ensure_ascii=True))
    return " ".join(parts)


def parse_line(line):
    """The fields of a result line as a dict of str (reason decoded), or None when `line` holds none.
    The line may carry a prefix before PREFIX (a log decorator). The reference for other parsers."""
    at = line.find(PREFIX + " v=")
    if at < 0:
        return None
    rest = line[at + len(PREFIX):].strip()
    head, sep, reason = rest.partition(" reason=")
    if not sep:
        return None
    fields = dict(p.split("=", 1) for p in head.split(" ") if "=" in p)
    fields["reason"] = json.loads(reason)
    return fields


def emit(report):
    """Write the line to fd 2 in one write() (lines of concurrent ranks do not interleave)."""
    line = format_line(report) + "\n"
    try:
        os.write(2, line.encode())
    except OSError:
        pass
    return line
