#include "exposition_check.h"

#include <cmath>
#include <cstdlib>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <utility>

namespace fr::health::testing {
namespace {

const std::regex kName("[a-zA-Z_:][a-zA-Z0-9_:]*");
const std::regex kLabelName("[a-zA-Z_][a-zA-Z0-9_]*");
const std::regex kFloat("[+-]?(([0-9]+(\\.[0-9]*)?|\\.[0-9]+)([eE][+-]?[0-9]+)?|Inf|NaN)");

std::optional<double> parse_float(const std::string& s) {
  if (!std::regex_match(s, kFloat)) return std::nullopt;
  if (s == "NaN") return NAN;
  if (s == "+Inf" || s == "Inf") return INFINITY;
  if (s == "-Inf") return -INFINITY;
  return std::strtod(s.c_str(), nullptr);
}

struct Sample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;
  std::string value;
};

// name{a="x",b="y"} value [timestamp]; returns an error message or "".
std::string parse_sample(const std::string& line, Sample& s) {
  size_t i = 0;
  while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
  s.name = line.substr(0, i);
  if (!std::regex_match(s.name, kName)) return "bad metric name '" + s.name + "'";
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (true) {
      if (i < line.size() && line[i] == '}') { ++i; break; }
      size_t eq = line.find('=', i);
      if (eq == std::string::npos) return "label without '='";
      std::string name = line.substr(i, eq - i);
      if (!std::regex_match(name, kLabelName) || name.rfind("__", 0) == 0) return "bad label name '" + name + "'";
      i = eq + 1;
      if (i >= line.size() || line[i] != '"') return "label value of '" + name + "' is not quoted";
      ++i;
      std::string value;
      bool closed = false;
      while (i < line.size()) {
        char c = line[i++];
        if (c == '"') { closed = true; break; }
        if (c == '\\') {
          if (i >= line.size()) return "dangling backslash";
          char e = line[i++];
          if (e == '\\') value += '\\';
          else if (e == '"') value += '"';
          else if (e == 'n') value += '\n';
          else return std::string("bad escape \\") + e + " in label '" + name + "'";
        } else {
          value += c;
        }
      }
      if (!closed) return "unterminated label value";
      for (auto& [n, v] : s.labels)
        if (n == name) return "duplicate label '" + name + "'";
      s.labels.emplace_back(name, value);
      if (i < line.size() && line[i] == ',') ++i;
      else if (i < line.size() && line[i] == '}') { ++i; break; }
      else return "expected ',' or '}' after a label";
    }
  }
  if (i >= line.size() || line[i] != ' ') return "expected a space before the value";
  std::istringstream rest(line.substr(i + 1));
  std::string ts, extra;
  rest >> s.value >> ts >> extra;
  if (!parse_float(s.value)) return "bad value '" + s.value + "'";
  if (!ts.empty() && !std::regex_match(ts, std::regex("-?[0-9]+"))) return "bad timestamp '" + ts + "'";
  if (!extra.empty()) return "trailing text";
  return "";
}

struct Family {
  std::string type;
  bool help = false;
  bool samples_done = false;  // another family started after this one's samples
};

struct Histogram {
  std::vector<std::pair<double, double>> buckets;  // le, count in order of appearance
  std::optional<double> sum, count;
  int line = 0;
};

}  // namespace

std::vector<std::string> check_exposition(const std::string& text) {
  std::vector<std::string> errors;
  auto err = [&](int n, const std::string& what) { errors.push_back("line " + std::to_string(n) + ": " + what); };
  if (!text.empty() && text.back() != '\n') err(0, "the text does not end in a newline");
  std::map<std::string, Family> families;
  std::string current;  // the family whose TYPE came last
  std::set<std::string> series;
  std::map<std::string, Histogram> histograms;  // key: family + labels without le
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) { err(n, "empty line"); continue; }
    if (line[0] == '#') {
      std::istringstream ws(line);
      std::string hash, kw, name;
      ws >> hash >> kw >> name;
      if (hash != "#" || (kw != "HELP" && kw != "TYPE")) continue;  // a plain comment
      if (!std::regex_match(name, kName)) { err(n, kw + " with a bad metric name '" + name + "'"); continue; }
      if (current != name && !current.empty()) families[current].samples_done = true;
      auto& f = families[name];
      if (f.samples_done) err(n, "family " + name + " appears twice");
      if (kw == "HELP") {
        if (f.help) err(n, "second HELP for " + name);
        f.help = true;
        if (line.size() <= 8 + name.size()) err(n, "HELP without text for " + name);
      } else {
        std::string type, extra;
        ws >> type >> extra;
        if (!f.type.empty()) err(n, "second TYPE for " + name);
        if (type != "counter" && type != "gauge" && type != "histogram" && type != "summary" && type != "untyped")
          err(n, "unknown type '" + type + "'");
        if (!extra.empty()) err(n, "trailing text after TYPE");
        f.type = type;
        if (type == "counter" && (name.size() < 6 || name.compare(name.size() - 6, 6, "_total") != 0))
          err(n, "counter " + name + " does not end in _total");
      }
      current = name;
      continue;
    }
    Sample s;
    if (auto e = parse_sample(line, s); !e.empty()) { err(n, e); continue; }
    // The family: the current one when the name matches it (with the histogram suffixes).
    std::string suffix;
    if (s.name != current) {
      for (const char* sfx : {"_bucket", "_sum", "_count"}) {
        std::string x(sfx);
        if (s.name.size() > x.size() && s.name.compare(s.name.size() - x.size(), x.size(), x) == 0 &&
            s.name.substr(0, s.name.size() - x.size()) == current)
          suffix = x;
      }
      if (suffix.empty() || families[current].type != "histogram") {
        err(n, "sample " + s.name + " outside its family (current: " + current + ")");
        continue;
      }
    } else if (families[current].type == "histogram") {
      err(n, "histogram sample without _bucket/_sum/_count");
      continue;
    }
    if (!families[current].help) err(n, "no HELP before the samples of " + current);
    std::string key = s.name;
    std::string hkey = current;
    std::optional<std::string> le;
    for (const auto& [k, v] : s.labels) {
      key += "|" + k + "=" + v;
      if (k == "le" && suffix == "_bucket") le = v;
      else hkey += "|" + k + "=" + v;
    }
    if (!series.insert(key).second) err(n, "duplicate series " + key);
    if (suffix.empty()) continue;
    auto& h = histograms[hkey];
    h.line = n;
    const double v = *parse_float(s.value);
    if (suffix == "_bucket") {
      if (!le) { err(n, "bucket without le"); continue; }
      auto bound = parse_float(*le);
      if (!bound) { err(n, "bad le '" + *le + "'"); continue; }
      if (!h.buckets.empty() && !(*bound > h.buckets.back().first)) err(n, "le not ascending");
      if (!h.buckets.empty() && v < h.buckets.back().second) err(n, "bucket counts decrease");
      h.buckets.emplace_back(*bound, v);
    } else if (suffix == "_sum") {
      h.sum = v;
    } else {
      h.count = v;
    }
  }
  for (const auto& [key, h] : histograms) {
    if (h.buckets.empty() || !std::isinf(h.buckets.back().first)) err(h.line, key + ": no final +Inf bucket");
    if (!h.sum) err(h.line, key + ": no _sum");
    if (!h.count) err(h.line, key + ": no _count");
    else if (!h.buckets.empty() && *h.count != h.buckets.back().second) err(h.line, key + ": _count differs from the +Inf bucket");
  }
  for (const auto& [name, f] : families)
    if (f.type.empty()) err(0, "no TYPE for " + name);
  return errors;
}

}  // namespace fr::health::testing
