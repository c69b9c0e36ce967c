// Chakra `.et` files at the wire level, compiled: a trace set holds millions of length-prefixed
// node records, and splitting them, reading each node's id, type and dependencies, telling the
// distinct contents apart and laying new records out are byte loops that numpy can only do in
// many whole-array passes (core/chakra/wire.py and encode.py say what each function means).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string_view.h>

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace nb = nanobind;

namespace {

using i64 = int64_t;
using u64 = uint64_t;

template <class T>
using In = nb::ndarray<const T, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
template <class T>
using Out = nb::ndarray<nb::numpy, T, nb::ndim<1>>;

constexpr int kMaxVarintBytes = 10;
constexpr uint8_t kIdKey = 1 << 3 | 0, kDataDepsKey = 5 << 3 | 2;
// the head fields in number order: (field, length-delimited)
constexpr std::pair<int, bool> kHeadFields[] = {{1, false}, {2, true}, {3, false}, {4, true}, {5, true}};
constexpr int kCtrlDeps = 4, kDataDeps = 5;

template <class T>
Out<T> to_numpy(std::vector<T>&& values) {
  auto* owned = new std::vector<T>(std::move(values));
  nb::capsule owner(owned, [](void* p) noexcept { delete static_cast<std::vector<T>*>(p); });
  return Out<T>(owned->data(), {owned->size()}, owner);
}

// The varint at `pos`, ending before `end`: (value, bytes it takes), or bytes 0 where it runs to
// `end` or past ten bytes without finishing.
std::pair<u64, i64> varint_at(const uint8_t* data, i64 pos, i64 end) {
  u64 value = 0;
  for (int byte = 0; byte < kMaxVarintBytes && pos + byte < end; ++byte) {
    const uint8_t b = data[pos + byte];
    value |= u64(b & 0x7F) << (7 * byte);
    if (b < 0x80) return {value, byte + 1};
  }
  return {0, 0};
}

void put_varint(std::string& out, u64 value) {
  while (value >= 0x80) {
    out.push_back(char(value & 0x7F | 0x80));
    value >>= 7;
  }
  out.push_back(char(value));
}

int varint_size(u64 value) {
  int size = 1;
  while (value >= 0x80) {
    value >>= 7;
    ++size;
  }
  return size;
}

const uint8_t* bytes_of(const nb::bytes& data) { return reinterpret_cast<const uint8_t*>(data.c_str()); }

// (start and end of each record after its length prefix; -1, or the byte where the record the
// file ends inside starts, its prefix included: then the last record is that one).
nb::tuple records(const nb::bytes& data) {
  const uint8_t* raw = bytes_of(data);
  const i64 total = i64(data.size());
  std::vector<i64> starts, ends;
  i64 pos = 0;
  while (pos < total) {
    const auto [size, width] = varint_at(raw, pos, total);
    const i64 start = width ? pos + width : total;
    if (!width || size > u64(total - start)) {
      starts.push_back(start);
      ends.push_back(total);
      const i64 cut = pos;
      return nb::make_tuple(to_numpy(std::move(starts)), to_numpy(std::move(ends)), cut);
    }
    starts.push_back(start);
    ends.push_back(start + i64(size));
    pos = start + i64(size);
  }
  return nb::make_tuple(to_numpy(std::move(starts)), to_numpy(std::move(ends)), i64(-1));
}

// (ids, types, dependency count per node, the dependencies (data_deps then ctrl_deps) one node
// after the other, where each content starts, regular): see wire.NodeHeads.
nb::tuple heads(const nb::bytes& data, const In<i64>& starts, const In<i64>& ends) {
  const uint8_t* raw = bytes_of(data);
  const size_t count = starts.shape(0);
  std::vector<u64> ids(count, 0), types(count, 0), deps;
  std::vector<i64> dep_counts(count, 0), content(count, 0);
  bool regular = true;
  for (size_t i = 0; i < count; ++i) {
    i64 cursor = starts(i);
    const i64 end = ends(i);
    i64 span_at[kDataDeps + 1] = {}, span_size[kDataDeps + 1] = {};
    for (const auto& [field, length] : kHeadFields) {
      if (cursor >= end || raw[cursor] != (field << 3 | (length ? 2 : 0))) continue;
      const auto [value, width] = varint_at(raw, cursor + 1, end);
      if (!width) {
        regular = false;
        cursor = end;
        break;
      }
      const i64 after = cursor + 1 + width;
      if (field == 1) ids[i] = value;
      if (field == 3) types[i] = value;
      if (field == kCtrlDeps || field == kDataDeps) {
        span_at[field] = after;
        span_size[field] = i64(value);
      }
      cursor = after + (length ? i64(value) : 0);
      if (length && value > u64(end - after)) {
        regular = false;
        break;
      }
    }
    content[i] = cursor;
    if (!regular) continue;
    if (cursor < end && raw[cursor] < 0x80 && (raw[cursor] >> 3) <= kDataDeps) regular = false;  // a head field further on
    for (const int field : {kDataDeps, kCtrlDeps}) {
      for (i64 at = span_at[field], stop = at + span_size[field]; at < stop;) {
        const auto [value, width] = varint_at(raw, at, stop);
        if (!width) {
          regular = false;
          break;
        }
        deps.push_back(value);
        ++dep_counts[i];
        at += width;
      }
    }
  }
  if (!regular) {
    deps.clear();
    dep_counts.assign(count, 0);
  }
  return nb::make_tuple(to_numpy(std::move(ids)), to_numpy(std::move(types)), to_numpy(std::move(dep_counts)),
                        to_numpy(std::move(deps)), to_numpy(std::move(content)), regular);
}

struct ContentKey {
  u64 type;
  std::string_view bytes;
  bool operator==(const ContentKey& o) const { return type == o.type && bytes == o.bytes; }
};

struct ContentHash {
  size_t operator()(const ContentKey& k) const {
    return std::hash<std::string_view>()(k.bytes) * 1099511628211ull ^ k.type;
  }
};

// (index of the first record of each distinct (type, bytes starts..ends), in order of
// appearance; each record's distinct one, numbered in that order).
nb::tuple contents(const nb::bytes& data, const In<i64>& starts, const In<i64>& ends, const In<u64>& types) {
  const char* raw = data.c_str();
  const size_t count = starts.shape(0);
  std::unordered_map<ContentKey, i64, ContentHash> seen;
  std::vector<i64> first, inverse(count);
  for (size_t i = 0; i < count; ++i) {
    const ContentKey key{types(i), std::string_view(raw + starts(i), size_t(ends(i) - starts(i)))};
    const auto [at, added] = seen.try_emplace(key, i64(first.size()));
    if (added) first.push_back(i64(i));
    inverse[i] = at->second;
  }
  return nb::make_tuple(to_numpy(std::move(first)), to_numpy(std::move(inverse)));
}

// The length-prefixed node records, one after the other: each node's id (left out when 0, as
// protobuf leaves a zero scalar), its kind's name and type fields (`head_table` rows
// `head_offsets[k]..[k+1]`), its dependencies packed as data_deps (left out when none), then its
// content (`content_table` row `content_row[i]`, `content_lengths` bytes of it).
nb::bytes assemble(const In<i64>& ids, const In<i64>& head_index, const In<uint8_t>& head_table,
                   const In<i64>& head_offsets, const In<i64>& dep_counts, const In<i64>& deps,
                   const nb::ndarray<const uint8_t, nb::ndim<2>, nb::c_contig, nb::device::cpu>& content_table,
                   const In<i64>& content_lengths, const In<i64>& content_row) {
  const size_t count = ids.shape(0);
  const size_t width = content_table.shape(1);
  std::string out, record;
  i64 dep = 0;
  for (size_t i = 0; i < count; ++i) {
    record.clear();
    if (ids(i) != 0) {
      record.push_back(char(kIdKey));
      put_varint(record, u64(ids(i)));
    }
    const i64 kind = head_index(i);
    record.append(reinterpret_cast<const char*>(head_table.data()) + head_offsets(kind),
                  size_t(head_offsets(kind + 1) - head_offsets(kind)));
    if (dep_counts(i) > 0) {
      i64 payload = 0;
      for (i64 d = dep; d < dep + dep_counts(i); ++d) payload += varint_size(u64(deps(d)));
      record.push_back(char(kDataDepsKey));
      put_varint(record, u64(payload));
      for (i64 d = dep; d < dep + dep_counts(i); ++d) put_varint(record, u64(deps(d)));
    }
    dep += dep_counts(i);
    const i64 row = content_row(i);
    record.append(reinterpret_cast<const char*>(content_table.data()) + size_t(row) * width,
                  size_t(content_lengths(row)));
    put_varint(out, record.size());
    out += record;
  }
  return nb::bytes(out.data(), out.size());
}

}  // namespace

NB_MODULE(_wire, m) {
  m.doc() = "Chakra .et records at the wire level: split, read node heads, group contents, assemble.";
  m.def("records", &records, nb::arg("data"));
  m.def("heads", &heads, nb::arg("data"), nb::arg("starts"), nb::arg("ends"));
  m.def("contents", &contents, nb::arg("data"), nb::arg("starts"), nb::arg("ends"), nb::arg("types"));
  m.def("assemble", &assemble, nb::arg("ids"), nb::arg("head_index"), nb::arg("head_table"),
        nb::arg("head_offsets"), nb::arg("dep_counts"), nb::arg("deps"), nb::arg("content_table"),
        nb::arg("content_lengths"), nb::arg("content_row"));
}
