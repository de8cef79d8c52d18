// Writing a small state file so that a crash, a full disk or a read-only directory never leaves it half
// written: the text goes to "<path>.tmp", is fsync'ed, renamed over `path`, and the directory is fsync'ed.
#pragma once

#include <sys/types.h>

#include <string>

#include "common/result.h"

namespace fr {

// Replaces `path` with `text` (mode `mode`, O_NOFOLLOW on the temporary). On success the new content is
// durable. On any failure `path` keeps its previous content, "<path>.tmp" is removed, and the error names
// the file and the step with the errno text ("write /s/flags.json.tmp: No space left on device").
Status write_file_atomic(const std::string& path, const std::string& text, mode_t mode = 0600);

// As write_file_atomic, without the fsyncs: a reader sees the old content or the new one, never a part,
// and the content survives the writer's death (the page cache keeps it), but not a crash of the machine.
// For files rewritten often on a latency-sensitive path (the front's status file, docs/front.md), where
// two fsyncs per write cost milliseconds and a machine crash makes the content moot anyway.
Status write_file_replace(const std::string& path, const std::string& text, mode_t mode = 0600);

// A private file (it may hold secrets: pushed flags with --api-key): `text` written to `path` as
// write_file_atomic does, mode 0600, its directory created 0700 when missing (and its parents as needed).
Status write_private_file(const std::string& path, const std::string& text);

}  // namespace fr
