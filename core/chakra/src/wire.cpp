// Chakra `.et` files at the wire level, compiled: a trace set holds millions of length-prefixed
// node records, and splitting them, reading each node's id, type and dependencies, telling the
// distinct contents apart, reading a content's fields and laying new records out are byte loops
// that numpy can only do in many whole-array passes, and protobuf one Python object at a time
// (core/chakra/wire.py and encode.py say what each function means).
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/string_view.h>

#include <cstdint>
#include <cstring>
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

// How `fields` read a record: plainly, or not (protobuf must: a field or value type it leaves to
// protobuf, bytes that may not parse, text that is not ASCII), or with a head field (1..5) in its
// content, which the content grouping cannot see.
enum FieldsStatus : int { kPlain = 0, kProtobuf = 1, kHeadInContent = 2 };
constexpr int kVarint = 0, kFixed64 = 1, kLength = 2;
constexpr int kNameField = 2, kTypeField = 3, kStartTime = 6, kDurationMicros = 7, kAttr = 10;
// AttributeProto: name, doc_string and the scalar members of its `value` oneof
constexpr int kAttrName = 1, kAttrDoc = 2, kDoubleVal = 3, kInt32Val = 7, kInt64Val = 9, kUint64Val = 13,
              kBoolVal = 27, kStringVal = 29;

// A cursor over the fields of one message, `pos`..`end` of `raw`; `ok` turns false on bytes
// that end inside a field or a key of a wire type protobuf would not read plainly.
struct Fields {
  const uint8_t* raw;
  i64 pos, end;
  bool ok = true;
  int field = 0, wire = 0;
  u64 value = 0;  // a varint's value, a length, or a fixed64's bits
  i64 at = 0;     // where a length-delimited field's bytes start

  bool next() {
    if (!ok || pos >= end) return false;
    const auto [key, width] = varint_at(raw, pos, end);
    field = int(key >> 3);
    wire = int(key & 7);
    pos += width;
    if (!width || key >> 3 == 0 || key >> 32) return ok = false;
    if (wire == kVarint) {
      const auto [number, size] = varint_at(raw, pos, end);
      value = number;
      pos += size;
      return ok = size > 0;
    }
    if (wire == kFixed64) {
      if (end - pos < 8) return ok = false;
      std::memcpy(&value, raw + pos, 8);
      pos += 8;
      return true;
    }
    if (wire == kLength) {
      const auto [size, width2] = varint_at(raw, pos, end);
      if (!width2 || size > u64(end - pos - width2)) return ok = false;
      at = pos + width2;
      value = size;
      pos = at + i64(size);
      return true;
    }
    return ok = false;  // groups and fixed32: not in a Chakra node
  }

  std::string_view bytes() const { return {reinterpret_cast<const char*>(raw + at), size_t(value)}; }
};

bool ascii(std::string_view text) {
  for (const char c : text)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

// One AttributeProto as (name, value) into `attrs` when it holds a value (the last of its oneof
// members, as protobuf keeps); false where protobuf must read it.
bool read_attr(const uint8_t* raw, i64 at, i64 size, nb::dict& attrs) {
  Fields f{raw, at, at + size};
  std::string_view name;
  nb::object value;
  while (f.next()) {
    const bool text = f.wire == kLength, varint = f.wire == kVarint;
    if (f.field == kAttrName && text) {
      name = f.bytes();
      if (!ascii(name)) return false;
    } else if (f.field == kAttrDoc && text) {
      if (!ascii(f.bytes())) return false;
    } else if (f.field == kDoubleVal && f.wire == kFixed64) {
      double d;
      std::memcpy(&d, &f.value, 8);
      value = nb::float_(d);
    } else if (f.field == kInt32Val && varint) {
      value = nb::int_(int32_t(uint32_t(f.value)));
    } else if (f.field == kInt64Val && varint) {
      value = nb::int_(int64_t(f.value));
    } else if (f.field == kUint64Val && varint) {
      value = nb::int_(f.value);
    } else if (f.field == kBoolVal && varint) {
      value = nb::bool_(f.value != 0);
    } else if (f.field == kStringVal && text) {
      if (!ascii(f.bytes())) return false;
      value = nb::str(f.bytes().data(), f.bytes().size());
    } else {
      return false;  // a list, an unknown field or an unexpected wire type
    }
  }
  if (!f.ok) return false;
  if (value.is_valid()) attrs[nb::str(name.data(), name.size())] = value;
  return true;
}

// Per record `records[k]` (node `starts`..`ends`, its content from `content`): (status, name,
// duration_micros, {attribute name: value}) as protobuf and trace.node_attrs read them, where
// the status is kPlain; the other fields are then not to be used.
nb::list fields(const nb::bytes& data, const In<i64>& starts, const In<i64>& ends, const In<i64>& content,
                const In<i64>& records) {
  const uint8_t* raw = bytes_of(data);
  nb::list out;
  for (size_t k = 0; k < records.shape(0); ++k) {
    const i64 i = records(k);
    int status = kPlain;
    std::string_view name;
    u64 micros = 0;
    nb::dict attrs;
    Fields head{raw, starts(i), content(i)};
    bool wide_type = false;  // protobuf keeps 32 bits of an enum: such a type is its to read
    while (head.next()) {
      if (head.field == kNameField && head.wire == kLength) name = head.bytes();
      if (head.field == kTypeField) wide_type = head.value >> 31;
    }
    if (!head.ok || !ascii(name) || wide_type) status = kProtobuf;
    Fields f{raw, content(i), ends(i)};
    while (status == kPlain && f.next()) {
      if (f.field <= kDataDeps) {
        status = kHeadInContent;
      } else if (f.field == kDurationMicros && f.wire == kVarint) {
        micros = f.value;
      } else if (f.field == kAttr && f.wire == kLength) {
        if (!read_attr(raw, f.at, i64(f.value), attrs)) status = kProtobuf;
      } else if (f.field != kStartTime || f.wire != kVarint) {
        status = kProtobuf;
      }
    }
    if (!f.ok && status == kPlain) status = kProtobuf;
    out.append(nb::make_tuple(status, nb::str(name.data(), name.size()), nb::int_(micros), attrs));
  }
  return out;
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
  m.doc() = "Chakra .et records at the wire level: split, read node heads, group contents, read fields, assemble.";
  m.def("records", &records, nb::arg("data"));
  m.def("heads", &heads, nb::arg("data"), nb::arg("starts"), nb::arg("ends"));
  m.attr("PLAIN") = int(kPlain);
  m.attr("PROTOBUF") = int(kProtobuf);
  m.attr("HEAD_IN_CONTENT") = int(kHeadInContent);
  m.def("fields", &fields, nb::arg("data"), nb::arg("starts"), nb::arg("ends"), nb::arg("content"),
        nb::arg("records"));
  m.def("contents", &contents, nb::arg("data"), nb::arg("starts"), nb::arg("ends"), nb::arg("types"));
  m.def("assemble", &assemble, nb::arg("ids"), nb::arg("head_index"), nb::arg("head_table"),
        nb::arg("head_offsets"), nb::arg("dep_counts"), nb::arg("deps"), nb::arg("content_table"),
        nb::arg("content_lengths"), nb::arg("content_row"));
}
