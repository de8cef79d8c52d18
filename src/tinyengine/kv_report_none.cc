// Built without engine_loader: no fastrestart-kv: line, no counters file (kv_report.h).
#include "tinyengine/kv_report.h"

namespace fr::te {

std::unique_ptr<KvReport> KvReport::start(std::shared_ptr<KvCache>) { return nullptr; }

}  // namespace fr::te
