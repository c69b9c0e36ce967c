#include "netcli.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <map>
#include <set>
#include <unistd.h>

#include "collectives.hpp"
#include "scan.hpp"
#include "textparse.hpp"

namespace netsim {

namespace {

const char* const kKinds = "all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, send_recv";
const char* const kAlgorithms = "ring, direct, halving_doubling, double_binary_tree";
constexpr int kMaxChunks = 1024;
constexpr int64_t kMaxFlowEstimate = int64_t{1} << 26;  // about a gigabyte of ops and edges
constexpr int64_t kMaxGroupIds = int64_t{1} << 24;

std::string quoted(const std::string& s) { return python_str(s); }

// int(text) as Python reads a decimal: spaces around, a sign, digits with single '_' between.
int64_t parse_integer(const std::string& text, const std::string& field) {
  size_t i = scan::sign(text, scan::spaces(text, 0));
  bool ok = i < text.size() && scan::digit(text[i]);
  std::string digits = i > 0 && text[i - 1] == '-' ? "-" : "";
  while (ok && i < text.size() && (scan::digit(text[i]) || text[i] == '_')) {
    if (text[i] == '_' && (i + 1 >= text.size() || !scan::digit(text[i + 1]))) ok = false;
    if (scan::digit(text[i])) digits += text[i];
    ++i;
  }
  if (!ok || scan::spaces(text, i) != text.size()) throw SpecError(field + ": " + quoted(text) + " must be an integer");
  errno = 0;
  const long long value = std::strtoll(digits.c_str(), nullptr, 10);
  if (errno == ERANGE) throw SpecError(field + ": " + quoted(text) + " is out of range");
  return value;
}

// float(text) as Python reads it (no '_' or hex); false when it is not a number.
bool parse_real(const std::string& text, double& out) {
  static const char* const kWords[] = {"inf", "infinity", "nan", nullptr};
  const size_t begin = scan::spaces(text, 0);
  size_t end = scan::decimal(text, begin);
  if (end == std::string::npos) {
    const size_t word = scan::sign(text, begin);
    end = word;
    std::string lower;
    while (end < text.size() && scan::letter(text[end])) lower += static_cast<char>(std::tolower(text[end++]));
    if (!scan::one_of(lower, kWords)) return false;
  }
  if (scan::spaces(text, end) != text.size()) return false;
  out = std::strtod(text.c_str() + begin, nullptr);
  return true;
}

std::string normalized(std::string s) {
  for (char& c : s) c = c == '-' ? '_' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

int collective_kind(const std::string& text) {
  static const std::map<std::string, int> kinds = {
      {"all_reduce", kAllReduce}, {"reduce_scatter", kReduceScatter}, {"all_gather", kAllGather},
      {"all_to_all", kAllToAll}, {"broadcast", kBroadcast}, {"send_recv", kSendRecv},
      {"allreduce", kAllReduce}, {"reducescatter", kReduceScatter}, {"allgather", kAllGather},
      {"alltoall", kAllToAll}, {"sendrecv", kSendRecv}};
  const auto it = kinds.find(normalized(text));
  if (it == kinds.end()) throw SpecError("--collective: " + quoted(text) + " is not known; allowed: " + kKinds);
  return it->second;
}

const char* kind_name(int kind) {
  static const char* const names[] = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "broadcast",
                                      "send_recv"};
  return names[kind];
}

std::string list_repr(const std::vector<std::string>& items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + quoted(items[i]);
  return out + "]";
}

std::string ids_repr(const std::vector<int64_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size(); ++i) out += (i ? ", " : "") + std::to_string(ids[i]);
  return out + "]";
}

// --group tokens: ids, ranges (0-7) and comma lists (0,2,4).
std::vector<int64_t> parse_group(const std::vector<std::string>& tokens) {
  std::vector<int64_t> ids;
  for (const std::string& token : tokens) {
    size_t start = 0;
    while (start <= token.size()) {
      size_t comma = token.find(',', start);
      if (comma == std::string::npos) comma = token.size();
      const std::string part = token.substr(start, comma - start);
      start = comma + 1;
      if (part.empty()) continue;
      const size_t first = part.find_first_not_of('-'), last = part.find_last_not_of('-');
      const bool range = first != std::string::npos && part.substr(first, last - first + 1).find('-') != std::string::npos;
      if (!range) {
        ids.push_back(parse_integer(part, "--group"));
        continue;
      }
      const size_t dash = part.find('-');
      const int64_t low = parse_integer(part.substr(0, dash), "--group");
      const int64_t high = parse_integer(part.substr(dash + 1), "--group");
      if (high - low + static_cast<int64_t>(ids.size()) > kMaxGroupIds)
        throw SpecError("--group: " + quoted(part) + " names more than " + std::to_string(kMaxGroupIds) + " NPUs");
      for (int64_t id = low; id <= high; ++id) ids.push_back(id);
    }
  }
  return ids;
}

bool valid_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = s[i];
    const int extra = c < 0x80 ? 0 : (c >> 5) == 0x6 ? 1 : (c >> 4) == 0xe ? 2 : (c >> 3) == 0x1e ? 3 : -1;
    if (extra < 0 || i + extra >= s.size() + (extra ? 0 : 1)) return false;
    for (int k = 1; k <= extra; ++k)
      if ((static_cast<unsigned char>(s[i + k]) >> 6) != 0x2) return false;
    i += extra + 1;
  }
  return true;
}

// The text of a network file ("network file ...: cannot be read (...)" when it cannot be).
std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  std::string text;
  int error = fd < 0 ? errno : 0;
  if (fd >= 0) {
    char buf[1 << 16];
    ssize_t n;
    while ((n = ::read(fd, buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
    if (n < 0) error = errno;
    ::close(fd);
  }
  if (error) throw SpecError("network file " + path + ": cannot be read (" + std::strerror(error) + ")");
  return text;
}

Value real_value(double x) {
  Value v;
  v.kind = Value::kReal;
  v.number = x;
  return v;
}

// Network(...).collective / .send_recv's checks of the request on a network of `npus` NPUs.
void check_request(const CollectiveRequest& req, const std::vector<int64_t>& group, int npus) {
  if (!std::isfinite(req.bytes) || req.bytes < 0 || req.bytes > 1e18)
    throw SpecError("size_bytes: " + python_float(req.bytes) + " must be a finite number of bytes in [0, 1e18]");
  if (group.empty() || std::any_of(group.begin(), group.end(), [&](int64_t g) { return g < 0 || g >= npus; }))
    throw SpecError("group: " + ids_repr(group) + " must be non-empty NPU ids in 0.." + std::to_string(npus - 1));
  if (std::set<int64_t>(group.begin(), group.end()).size() != group.size())
    throw SpecError("group: " + ids_repr(group) + " lists an NPU twice");
}

int checked_chunks(int64_t chunks) {
  if (chunks < 1 || chunks > kMaxChunks)
    throw SpecError("chunks: " + std::to_string(chunks) + " must be an integer in [1, " + std::to_string(kMaxChunks) + "]");
  return static_cast<int>(chunks);
}

std::string format_bytes(double n) {
  char buf[64];
  if (n >= 1073741824.0) std::snprintf(buf, sizeof buf, "%.2f GiB", n / 1073741824.0);
  else if (n >= 1048576.0) std::snprintf(buf, sizeof buf, "%.2f MiB", n / 1048576.0);
  else if (n >= 1024.0) std::snprintf(buf, sizeof buf, "%.2f KiB", n / 1024.0);
  else std::snprintf(buf, sizeof buf, "%.0f B", n);
  return buf;
}

std::string format_time(double t) {
  char buf[64];
  if (t >= 1.0) std::snprintf(buf, sizeof buf, "%.3f s", t);
  else if (t >= 1e-3) std::snprintf(buf, sizeof buf, "%.3f ms", t / 1e-3);
  else if (t >= 1e-6) std::snprintf(buf, sizeof buf, "%.3f us", t / 1e-6);
  else std::snprintf(buf, sizeof buf, "%.1f ns", t * 1e9);
  return buf;
}

std::string json_float(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  return python_float(v);
}

double bus_factor(int kind, int n) {
  if (kind == kAllReduce) return static_cast<double>(2 * (n - 1)) / n;
  if (kind == kBroadcast || kind == kSendRecv) return 1.0;
  return static_cast<double>(n - 1) / n;
}

// The `count` links busy longest (then carrying most), busiest first, of those that carried bytes.
std::vector<size_t> busiest(const LinkStats& stats, int64_t count) {
  std::vector<size_t> order(stats.busy_s.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    if (stats.busy_s[a] != stats.busy_s[b]) return stats.busy_s[a] > stats.busy_s[b];
    return stats.bytes[a] > stats.bytes[b];
  });
  if (static_cast<int64_t>(order.size()) > count) order.resize(static_cast<size_t>(count));
  order.erase(std::remove_if(order.begin(), order.end(), [&](size_t i) { return !(stats.bytes[i] > 0); }), order.end());
  return order;
}

struct Report {
  int kind;
  std::string algorithm;
  double bytes;
  int group_size;
  int num_npus;
  size_t num_dims;
  int64_t top;
  bool json;
};

std::string report(const Report& r, const Simulated& sim) {
  const double time_s = sim.out.makespan_s;
  const double algbw = time_s > 0 ? r.bytes / time_s / 1e9 : INFINITY;
  const double busbw = algbw * bus_factor(r.kind, r.group_size);
  const std::vector<size_t> links = busiest(sim.out.links, r.top);
  const auto& all = sim.net->links();
  const auto& dims = sim.net->link_dims();
  std::string out;
  char buf[512];
  if (r.json) {
    out = "{\"time_s\": " + json_float(time_s) + ", \"algbw_gbps\": " + json_float(algbw) + ", \"busbw_gbps\": " +
          json_float(busbw) + ", \"kind\": \"" + kind_name(r.kind) + "\", \"algorithm\": \"" + r.algorithm +
          "\", \"size_bytes\": " + json_float(r.bytes) + ", \"group_size\": " + std::to_string(r.group_size) +
          ", \"num_npus\": " + std::to_string(r.num_npus) + ", \"flows\": " + std::to_string(sim.out.flows) +
          ", \"busiest_links\": [";
    for (size_t k = 0; k < links.size(); ++k) {
      const size_t i = links[k];
      out += (k ? ", " : "") + std::string("{\"src\": ") + std::to_string(all[i].src) + ", \"dst\": " +
             std::to_string(all[i].dst) + ", \"dim\": " + std::to_string(dims[i]) + ", \"bytes\": " +
             json_float(sim.out.links.bytes[i]) + ", \"busy_s\": " + json_float(sim.out.links.busy_s[i]) +
             ", \"peak_flows\": " + std::to_string(sim.out.links.peak_flows[i]) + "}";
    }
    return out + "]}\n";
  }
  out = std::string(kind_name(r.kind)) + " of " + format_bytes(r.bytes) + " on " + std::to_string(r.group_size) +
        " NPUs (" + r.algorithm + ", " + std::to_string(r.num_dims) + " dimension(s)): " + format_time(time_s) + "\n";
  std::snprintf(buf, sizeof buf, "  algbw %.2f GB/s   busbw %.2f GB/s   (%lld flows)\n", algbw, busbw,
                static_cast<long long>(sim.out.flows));
  out += buf;
  if (!links.empty()) out += "  most loaded links (node ids; switches follow the NPUs):\n";
  for (const size_t i : links) {
    std::snprintf(buf, sizeof buf, "    %6d -> %-6d dim %d  %11s  busy %s  peak %d flow(s)\n", all[i].src, all[i].dst,
                  dims[i], format_bytes(sim.out.links.bytes[i]).c_str(), format_time(sim.out.links.busy_s[i]).c_str(),
                  sim.out.links.peak_flows[i]);
    out += buf;
  }
  return out;
}

// The network file's dimensions: ASTRA-sim's format here, anything else through `fallback`.
std::vector<DimSpec> load_network(const std::string& path, std::optional<int64_t> npus, const NetworkFallback& fallback) {
  const std::string text = read_file(path);
  std::optional<std::vector<DimInput>> inputs;
  if (valid_utf8(text)) inputs = astra_sim_dims(text, path);
  if (!inputs) return fallback(path, npus);
  std::vector<DimSpec> dims;
  for (size_t d = 0; d < inputs->size(); ++d) dims.push_back(validate_dim((*inputs)[d], "dims[" + std::to_string(d) + "]"));
  return dims;
}

}  // namespace

const std::map<std::string, double>& byte_units() {
  static const std::map<std::string, double> units = {
      {"", 1}, {"b", 1}, {"byte", 1}, {"bytes", 1}, {"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
      {"kib", 1024.0}, {"mib", 1048576.0}, {"gib", 1073741824.0}, {"tib", 1099511627776.0}};
  return units;
}

double parse_bytes(const std::string& text) {
  const size_t begin = scan::spaces(text, 0);
  const size_t number_end = scan::decimal(text, begin);
  if (number_end == std::string::npos) throw SpecError("size " + quoted(text) + " is not a number with a unit");
  size_t unit_begin = scan::spaces(text, number_end), unit_end = unit_begin;
  while (unit_end < text.size() && (scan::letter(text[unit_end]) || text[unit_end] == '/' ||
                                    text.compare(unit_end, 2, "\xC2\xB5") == 0))
    unit_end += text[unit_end] == '\xC2' ? 2 : 1;
  if (scan::spaces(text, unit_end) != text.size())
    throw SpecError("size " + quoted(text) + " is not a number with a unit");
  const std::string unit = text.substr(unit_begin, unit_end - unit_begin);
  std::string lower;
  for (const char c : unit) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  const auto it = byte_units().find(lower);
  if (it == byte_units().end())
    throw SpecError("size " + quoted(text) + " has unknown unit " + quoted(unit) +
                    "; use B, KB, MB, GB, TB, KiB, MiB, GiB or TiB");
  const double value = std::strtod(text.substr(begin, number_end - begin).c_str(), nullptr) * it->second;
  if (!std::isfinite(value) || value < 0) throw SpecError("size " + quoted(text) + " must be finite and >= 0");
  return value;
}

const std::vector<NetOption>& net_options() {
  static const std::vector<NetOption> options = {
      {"--network", NetOption::kValue, true, "FILE", nullptr,
       "our hardware YAML (network: list of dimensions) or an ASTRA-sim network YAML"},
      {"--npus", NetOption::kValue, false, "N", nullptr, "total NPUs, for a network whose outer size is auto"},
      {"--collective", NetOption::kValue, true, "KIND", nullptr, std::string("one of ") + kKinds},
      {"--size", NetOption::kValue, true, "SIZE", nullptr, "bytes per rank, e.g. 1048576, 64MiB, 1GB"},
      {"--algorithm", NetOption::kValue, false, "A", nullptr,
       std::string("one of ") + kAlgorithms + " (default: direct for all_to_all, as NCCL sends it, ring otherwise)"},
      {"--group", NetOption::kList, false, "NPU", nullptr,
       "NPU ids or ranges (0-7, 0,2,4); default all; send_recv takes SRC DST"},
      {"--root", NetOption::kValue, false, "NPU", "0", "broadcast root (default 0)"},
      {"--chunks", NetOption::kValue, false, "N", "1", "chunks pipelined across dimensions"},
      {"--flat", NetOption::kFlag, false, nullptr, nullptr, "run multi-dimension groups flat, not per dimension"},
      {"--fault", NetOption::kAppend, false, "SRC-DST:FACTOR", nullptr,
       "degrade link SRC-DST to FACTOR of its bandwidth (0 removes it); repeatable"},
      {"--top", NetOption::kValue, false, "K", "5", "how many of the busiest links to show"},
      {"--json", NetOption::kFlag, false, nullptr, nullptr, "print one JSON object"}};
  return options;
}

bool parse_net_argv(int argc, const char* const* argv, NetArgs& out) {
  std::set<std::string> seen;
  for (int i = 0; i < argc;) {
    std::string word = argv[i++];
    std::optional<std::string> inline_value;
    const size_t eq = word.find('=');
    if (word.compare(0, 2, "--") == 0 && eq != std::string::npos) {
      inline_value = word.substr(eq + 1);
      word = word.substr(0, eq);
    }
    const NetOption* option = nullptr;
    for (const NetOption& o : net_options())
      if (word == o.flag) option = &o;
    if (option == nullptr) return false;  // help, an abbreviation, a stray word: argparse's to answer
    seen.insert(word);
    if (option->kind == NetOption::kFlag) {
      if (inline_value) return false;
      (word == "--flat" ? out.flat : out.json) = true;
      continue;
    }
    std::vector<std::string> values;
    if (inline_value) {
      values.push_back(*inline_value);
    } else {
      while (i < argc && argv[i][0] != '-' && (values.empty() || option->kind == NetOption::kList)) values.push_back(argv[i++]);
      if (i < argc && argv[i][0] == '-' && argv[i][1] != '-' && argv[i][1] != '\0') return false;  // '-5': argparse decides
    }
    if (values.empty()) return false;
    if (option->kind == NetOption::kList) {
      out.group = values;
    } else if (option->kind == NetOption::kAppend) {
      out.faults.push_back(values[0]);
    } else {
      const std::string& v = values[0];
      if (word == "--network") out.network = v;
      else if (word == "--npus") out.npus = v;
      else if (word == "--collective") out.collective = v;
      else if (word == "--size") out.size = v;
      else if (word == "--algorithm") out.algorithm = v;
      else if (word == "--root") out.root = v;
      else if (word == "--chunks") out.chunks = v;
      else if (word == "--top") out.top = v;
    }
  }
  for (const NetOption& o : net_options())
    if (o.required && !seen.count(o.flag)) return false;
  return true;
}

std::optional<std::vector<DimInput>> astra_sim_dims(const std::string& text, const std::string& source) {
  Value config;
  if (!parse_json(text, config) && !parse_simple_yaml(text, config)) return std::nullopt;
  if (config.kind != Value::kDict)
    throw SpecError(source + ": must be a mapping with `network:` or ASTRA-sim's `topology:`");
  if (config.get("network") != nullptr) return std::nullopt;
  if (config.get("topology") == nullptr)
    throw SpecError(source + ": has neither `network:` (our format) nor `topology:` (ASTRA-sim's)");
  const char* const keys[] = {"topology", "npus_count", "bandwidth", "latency"};
  const Value* columns[4];
  for (int k = 0; k < 4; ++k) {
    const Value* value = config.get(keys[k]);
    if (value == nullptr || value->kind != Value::kList || value->items.empty())
      throw SpecError(source + ": " + keys[k] + ": " + (value ? python_repr(*value) : "None") +
                      " must be a non-empty list (ASTRA-sim format)");
    columns[k] = value;
  }
  const size_t n = columns[0]->items.size();
  if (columns[1]->items.size() != n || columns[2]->items.size() != n || columns[3]->items.size() != n) {
    std::string lengths = "{";
    for (int k = 0; k < 4; ++k)
      lengths += (k ? ", '" : "'") + std::string(keys[k]) + "': " + std::to_string(columns[k]->items.size());
    throw SpecError(source + ": topology, npus_count, bandwidth and latency must have equal lengths, got " + lengths + "}");
  }
  std::vector<DimInput> dims;
  for (size_t d = 0; d < n; ++d) {
    for (int k = 2; k < 4; ++k)
      if (!columns[k]->items[d].is_real())
        throw SpecError(source + ": " + keys[k] + "[" + std::to_string(d) + "]: " + python_repr(columns[k]->items[d]) +
                        " must be a number");
    DimInput dim;
    dim.topology = columns[0]->items[d];
    dim.size = columns[1]->items[d];
    dim.bandwidth_gbps = real_value(columns[2]->items[d].number * kAstraSimUnitGBps);
    dim.latency_s = real_value(columns[3]->items[d].number * 1e-9);
    dim.oversubscription = real_value(1.0);
    validate_dim(dim, source + ": dimension " + std::to_string(d));
    dims.push_back(dim);
  }
  return dims;
}

FaultOption parse_fault(const std::string& text) {
  const size_t colon = text.find(':');
  const std::string link = text.substr(0, colon);
  const size_t dash = link.find('-');
  if (colon == std::string::npos || dash == std::string::npos || link.find('-', dash + 1) != std::string::npos)
    throw SpecError("--fault: " + quoted(text) + " must look like SRC-DST:FACTOR, e.g. 0-1:0.5 (FACTOR 0 removes the link)");
  FaultOption fault{parse_integer(link.substr(0, dash), "--fault"), parse_integer(link.substr(dash + 1), "--fault"), 0.0};
  const std::string factor_text = text.substr(colon + 1);
  if (!parse_real(factor_text, fault.factor))
    throw SpecError("--fault: factor " + quoted(factor_text) + " in " + quoted(text) + " must be a number in [0, 1]");
  if (!(fault.factor >= 0 && fault.factor <= 1))
    throw SpecError("--fault: factor " + quoted(factor_text) + " in " + quoted(text) + " must be in [0, 1] (0 removes the link)");
  return fault;
}

int64_t top_links(const std::string& text) {
  const int64_t top = parse_integer(text, "--top");
  if (top < 0) throw SpecError("--top: " + std::to_string(top) + " must be an integer >= 0");
  return top;
}

std::vector<FaultOption> checked_faults(const std::vector<DimSpec>& dims, const std::vector<std::string>& texts) {
  std::vector<FaultOption> faults;
  std::map<std::pair<int64_t, int64_t>, std::string> named;  // a link by its two ends, either way round
  for (const std::string& text : texts) {
    faults.push_back(parse_fault(text));
    const auto ends = std::minmax(faults.back().a, faults.back().b);
    const auto [it, fresh] = named.emplace(ends, text);
    if (!fresh)
      throw SpecError("--fault " + quoted(text) + ": the link of --fault " + quoted(it->second) +
                      " again (a fault degrades both directions of a link; give each link once)");
  }
  check_totals(dims);
  if (faults.empty()) return faults;
  const Network base(dims);
  std::set<std::pair<int, int>> pairs;
  for (const Link& l : base.links()) pairs.insert({l.src, l.dst});
  const int64_t last = base.num_nodes() - 1;
  // soft faults first, then removed links, as the simulator is given them
  for (const bool removed : {false, true}) {
    for (size_t i = 0; i < faults.size(); ++i) {
      const FaultOption& f = faults[i];
      if ((f.factor == 0) != removed) continue;
      const std::string where = "--fault " + quoted(texts[i]) + ": ";
      const std::string ends = " (link ends are node ids: the NPUs from 0, then the switches)";
      for (const int64_t end : {f.a, f.b})
        if (end < 0 || end > last)
          throw SpecError(where + std::to_string(end) + " must be an integer in [0, " + std::to_string(last) + "]" + ends);
      const std::pair<int, int> ab(static_cast<int>(f.a), static_cast<int>(f.b));
      if (!pairs.count(ab) && !pairs.count({ab.second, ab.first}))
        throw SpecError(where + "there is no link between node " + std::to_string(f.a) + " and node " +
                        std::to_string(f.b) + ends);
    }
  }
  return faults;
}

Simulated simulate_collective(const std::vector<DimSpec>& dims, const std::vector<FaultOption>& faults,
                              const CollectiveRequest& req) {
  Simulated sim;
  sim.net = std::make_unique<Network>(dims);
  for (const FaultOption& f : faults)
    if (f.factor > 0) sim.net->soft_fault(static_cast<int>(f.a), static_cast<int>(f.b), f.factor, 0.0);
  for (const FaultOption& f : faults)
    if (f.factor == 0) sim.net->hard_fault(static_cast<int>(f.a), static_cast<int>(f.b));
  Dag dag;
  const size_t p = req.group.size();
  const size_t chunks = static_cast<size_t>(req.chunks);
  dag.reserve(2 * p * p * chunks + 4 * p, 6 * p * p * chunks + 4 * p);
  emit_collective(dag, *sim.net, req, std::vector<int>(p, -1));
  sim.out = simulate(*sim.net, dag, false);
  return sim;
}

NetOutcome run_net(const NetArgs& args, const NetworkFallback& fallback) {
  NetOutcome outcome;
  try {
    Report r{};
    r.top = top_links(args.top);
    r.json = args.json;
    r.kind = collective_kind(args.collective);
    double bytes;
    try {
      bytes = parse_bytes(args.size);
    } catch (const SpecError& e) {
      throw SpecError(std::string("--size: ") + e.what());
    }
    if (bytes != std::floor(bytes))
      throw SpecError("--size: " + quoted(args.size) + " is " + python_float(bytes) + " bytes: give whole bytes");
    std::optional<int64_t> npus;
    if (args.npus) {
      npus = parse_integer(*args.npus, "--npus");
      if (*npus < 1) throw SpecError("--npus: " + std::to_string(*npus) + " must be an integer >= 1");
    }
    const std::vector<DimSpec> dims = load_network(args.network, npus, fallback);
    const std::vector<FaultOption> faults = checked_faults(dims, args.faults);
    int num_npus = 1;
    for (const DimSpec& d : dims) num_npus *= d.size;
    if (num_npus < 2) throw SpecError("--network: " + quoted(args.network) + " has one NPU: a collective needs two or more");
    std::vector<int64_t> group;
    if (args.group) group = parse_group(*args.group);
    const int64_t chunks = parse_integer(args.chunks, "--chunks");
    CollectiveRequest req;
    req.kind = r.kind;
    req.bytes = bytes;
    if (r.kind == kSendRecv) {
      if (!args.group || group.size() != 2)
        throw SpecError("--group: send_recv needs exactly two NPUs, SRC DST; got " +
                        (args.group ? list_repr(*args.group) : std::string("None")));
      check_request(req, group, num_npus);
      req.algorithm = 0;
      req.hierarchical = false;
      r.algorithm = "direct";
    } else {
      if (args.group && std::set<int64_t>(group.begin(), group.end()).size() < 2)
        throw SpecError("--group: a collective needs two or more distinct NPUs; got " + list_repr(*args.group));
      r.algorithm = args.algorithm.empty() ? (r.kind == kAllToAll ? "direct" : "ring") : normalized(args.algorithm);
      const int64_t root = parse_integer(args.root, "--root");
      static const std::map<std::string, int> algorithms = {
          {"ring", kAlgoRing}, {"direct", kAlgoDirect}, {"halving_doubling", kAlgoHalvingDoubling},
          {"double_binary_tree", kAlgoDoubleBinaryTree}};
      const auto algorithm = algorithms.find(r.algorithm);
      if (algorithm == algorithms.end())
        throw SpecError("algorithm: " + quoted(r.algorithm) + " is not known; allowed: " + kAlgorithms);
      req.algorithm = algorithm->second;
      if (!args.group)
        for (int i = 0; i < num_npus; ++i) group.push_back(i);
      check_request(req, group, num_npus);
      if (r.kind == kBroadcast && std::find(group.begin(), group.end(), root) == group.end())
        throw SpecError("root: " + std::to_string(root) + " must be an NPU of the group");
      req.root = static_cast<int>(root);
      req.hierarchical = !args.flat;
    }
    req.chunks = checked_chunks(chunks);
    const int64_t p = static_cast<int64_t>(group.size());
    if (r.kind != kSendRecv && p * p * req.chunks > kMaxFlowEstimate)
      throw SpecError("group: " + std::to_string(p) + " NPUs x " + std::to_string(req.chunks) +
                      " chunks is too large to simulate (group size squared times chunks must stay below " +
                      std::to_string(kMaxFlowEstimate) + ")");
    req.group.assign(group.begin(), group.end());
    r.bytes = bytes;
    r.group_size = static_cast<int>(p);
    r.num_npus = num_npus;
    r.num_dims = dims.size();
    outcome.out = report(r, simulate_collective(dims, faults, req));
  } catch (const std::invalid_argument& e) {  // SpecError and the simulator's own input errors
    outcome = NetOutcome{2, "", std::string("rapid net: error: ") + e.what() + "\n"};
  } catch (const NoRouteError& e) {
    outcome = NetOutcome{2, "", std::string("rapid net: error: ") + e.what() + "\n"};
  }
  return outcome;
}

}  // namespace netsim
