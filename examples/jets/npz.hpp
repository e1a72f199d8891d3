// NumPy's .npz files without Python: read what np.savez and
// np.savez_compressed write (a zip of .npy files, stored or deflated, with
// or without zip64 records), and write stored ones np.load reads. Enough
// for the jet sample (little-endian float32/float64/uint8/int32/int64
// arrays in C order, and 0-d unicode strings), with zlib doing the inflate
// and the CRC; anything else is a clear npz::error, never a wrong array.
//
//   const npz::archive sample = npz::read("jets.npz");
//   std::span<const float> images = sample.at("images").values<float>();  // shape() {n, 32, 32}
//   std::string settings = sample.at("settings").text();
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <numeric>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace npz {

struct error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

template <class T>
constexpr std::string_view descr_of() {
  if constexpr (std::is_same_v<T, float>)
    return "<f4";
  else if constexpr (std::is_same_v<T, double>)
    return "<f8";
  else if constexpr (std::is_same_v<T, std::uint8_t>)
    return "|u1";
  else if constexpr (std::is_same_v<T, std::int32_t>)
    return "<i4";
  else if constexpr (std::is_same_v<T, std::int64_t>)
    return "<i8";
  else
    static_assert(sizeof(T) == 0, "npz: float, double, uint8, int32 or int64");
}

// One array: its NumPy type string ("<f4"), its shape (empty: 0-d) and its
// bytes in C order.
class array {
 public:
  array() = default;
  array(std::string descr, std::vector<std::size_t> shape, std::vector<std::byte> bytes)
      : descr_(std::move(descr)), shape_(std::move(shape)), bytes_(std::move(bytes)) {}
  template <class T>
  static array of(std::vector<std::size_t> shape, std::span<const T> values) {
    const auto bytes = std::as_bytes(values);
    array made(std::string(descr_of<T>()), std::move(shape), {bytes.begin(), bytes.end()});
    if (made.elements() != values.size()) throw error("npz: the shape does not hold the values given");
    return made;
  }

  const std::string& descr() const noexcept { return descr_; }
  const std::vector<std::size_t>& shape() const noexcept { return shape_; }
  std::span<const std::byte> bytes() const noexcept { return bytes_; }
  std::size_t elements() const {
    return std::accumulate(shape_.begin(), shape_.end(), std::size_t{1}, std::multiplies<>());
  }

  // The values as T: the type must be the array's own (no conversions).
  template <class T>
  std::span<const T> values() const {
    if (descr_ != descr_of<T>()) throw error("npz: the array holds " + descr_ + ", not " + std::string(descr_of<T>()));
    return {reinterpret_cast<const T*>(bytes_.data()), bytes_.size() / sizeof(T)};
  }
  // A 0-d string array ("<U..." UTF-32) as UTF-8.
  std::string text() const;

 private:
  std::string descr_;
  std::vector<std::size_t> shape_;
  std::vector<std::byte> bytes_;
};

using archive = std::map<std::string, array, std::less<>>;  // by name, without ".npy"

namespace detail {

inline std::uint64_t little(std::span<const std::byte> bytes, std::size_t at, std::size_t width) {
  if (at + width > bytes.size()) throw error("npz: truncated (a record runs past the end of the file)");
  std::uint64_t value = 0;
  for (std::size_t i = 0; i < width; ++i) value |= std::uint64_t(bytes[at + i]) << (8 * i);
  return value;
}

inline void put_little(std::vector<std::byte>& out, std::uint64_t value, std::size_t width) {
  for (std::size_t i = 0; i < width; ++i) out.push_back(std::byte((value >> (8 * i)) & 0xff));
}

inline std::uint32_t crc_of(std::span<const std::byte> bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  for (std::size_t done = 0; done < bytes.size();) {  // zlib takes 32-bit lengths
    const uInt part = static_cast<uInt>(std::min<std::size_t>(bytes.size() - done, 1u << 30));
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + done), part);
    done += part;
  }
  return static_cast<std::uint32_t>(crc);
}

inline std::vector<std::byte> inflated(std::span<const std::byte> packed, std::size_t size, const std::string& name) {
  std::vector<std::byte> out(size);
  z_stream stream{};
  if (inflateInit2(&stream, -MAX_WBITS) != Z_OK) throw error("npz: zlib's inflateInit2 failed");
  stream.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(packed.data()));
  stream.next_out = reinterpret_cast<Bytef*>(out.data());
  int status = Z_OK;
  std::size_t in_left = packed.size(), out_left = size;
  while (status == Z_OK) {  // zlib's counts are 32-bit: feed at most 1 GiB at a time
    if (stream.avail_in == 0 && in_left > 0) {
      stream.avail_in = static_cast<uInt>(std::min<std::size_t>(in_left, 1u << 30));
      in_left -= stream.avail_in;
    }
    if (stream.avail_out == 0 && out_left > 0) {
      stream.avail_out = static_cast<uInt>(std::min<std::size_t>(out_left, 1u << 30));
      out_left -= stream.avail_out;
    }
    status = inflate(&stream, Z_NO_FLUSH);  // Z_BUF_ERROR: no room left, or no input left (checked below)
  }
  const std::size_t produced = static_cast<std::size_t>(stream.total_out);
  inflateEnd(&stream);
  if (status != Z_STREAM_END || produced != size)
    throw error("npz: " + name + ": its deflate stream is damaged or of the wrong length");
  return out;
}

// "{'descr': '<f4', 'fortran_order': False, 'shape': (600, 32, 32), }"
inline std::string quoted_after(std::string_view header, std::string_view key, const std::string& name) {
  const std::size_t at = header.find(std::string("'").append(key).append("'"));  // not "'" + ...: GCC bug 105329
  const std::size_t open = at == std::string_view::npos ? at : header.find('\'', at + key.size() + 2);
  const std::size_t close = open == std::string_view::npos ? open : header.find('\'', open + 1);
  if (close == std::string_view::npos) throw error("npz: " + name + ": no '" + std::string(key) + "' in its header");
  return std::string(header.substr(open + 1, close - open - 1));
}

inline array parsed_npy(std::vector<std::byte> file, const std::string& name) {
  const std::span<const std::byte> bytes(file);
  static constexpr unsigned char magic[] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (bytes.size() < 10 || std::memcmp(bytes.data(), magic, sizeof magic) != 0)
    throw error("npz: " + name + " is not a .npy array");
  const auto major = static_cast<unsigned>(bytes[6]);
  const std::size_t width = major == 1 ? 2 : 4;
  const std::size_t length = little(bytes, 8, width), start = 8 + width + length;
  if (start > bytes.size()) throw error("npz: " + name + ": its header runs past its end");
  const std::string_view header(reinterpret_cast<const char*>(bytes.data() + 8 + width), length);
  std::string descr = quoted_after(header, "descr", name);
  if (header.find("'fortran_order': True") != std::string_view::npos)
    throw error("npz: " + name + " is in Fortran order; save it C-contiguous");
  const std::size_t open = header.find('(', header.find("'shape'")), close = header.find(')', open);
  if (open == std::string_view::npos || close == std::string_view::npos)
    throw error("npz: " + name + ": no shape in its header");
  std::vector<std::size_t> shape;
  for (std::size_t at = open + 1; at < close;) {
    while (at < close && (header[at] == ' ' || header[at] == ',')) ++at;
    std::size_t value = 0, digits = 0;
    for (; at < close && header[at] >= '0' && header[at] <= '9'; ++at, ++digits)
      value = value * 10 + (header[at] - '0');
    if (digits > 0)
      shape.push_back(value);
    else if (at < close)
      throw error("npz: " + name + ": a shape that is not integers");
  }
  std::vector<std::byte> data(bytes.begin() + static_cast<std::ptrdiff_t>(start), bytes.end());
  array made(std::move(descr), std::move(shape), std::move(data));
  std::size_t item = 0;
  const std::string& d = made.descr();
  if (d.size() >= 3 && (d[0] == '<' || d[0] == '|') && (d[1] == 'f' || d[1] == 'u' || d[1] == 'i' || d[1] == 'U'))
    item = std::stoul(d.substr(2)) * (d[1] == 'U' ? 4 : 1);
  else
    throw error("npz: " + name + " holds " + d + " (chorus reads little-endian numbers and strings)");
  if (made.elements() * item != made.bytes().size())
    throw error("npz: " + name + ": " + std::to_string(made.bytes().size()) + " bytes of data for its shape");
  return made;
}

struct entry {
  std::string name;
  std::uint16_t method = 0;
  std::uint32_t crc = 0;
  std::uint64_t packed = 0, size = 0, offset = 0;
};

// The sizes and offset a zip64 extra field holds for the ones saturated at 0xffffffff.
inline void zip64_fields(entry& e, std::span<const std::byte> extra, bool size_full, bool packed_full,
                         bool offset_full) {
  for (std::size_t at = 0; at + 4 <= extra.size();) {
    const auto id = little(extra, at, 2), length = little(extra, at + 2, 2);
    if (id == 1) {
      std::size_t field = at + 4;
      for (auto [full, value] : {std::pair{size_full, &e.size}, {packed_full, &e.packed}, {offset_full, &e.offset}})
        if (full) {
          *value = little(extra, field, 8);
          field += 8;
        }
    }
    at += 4 + length;
  }
}

inline std::vector<entry> central_directory(std::span<const std::byte> zip, const std::string& path) {
  if (zip.size() < 22) throw error("npz: " + path + " is too short to be a zip file");
  std::size_t end = zip.size() - 22;  // the end record, before a comment of up to 64 KiB
  while (little(zip, end, 4) != 0x06054b50) {
    if (end == 0 || zip.size() - end > 22 + 65535) throw error("npz: " + path + " is not a zip file (.npz)");
    --end;
  }
  std::uint64_t count = little(zip, end + 10, 2), start = little(zip, end + 16, 4);
  if ((count == 0xffff || start == 0xffffffff) && end >= 20 && little(zip, end - 20, 4) == 0x07064b50) {
    const std::uint64_t record = little(zip, end - 20 + 8, 8);  // the zip64 end record
    if (little(zip, record, 4) != 0x06064b50) throw error("npz: " + path + ": a damaged zip64 end record");
    count = little(zip, record + 32, 8);
    start = little(zip, record + 48, 8);
  }
  std::vector<entry> entries;
  for (std::uint64_t i = 0, at = start; i < count; ++i) {
    if (little(zip, at, 4) != 0x02014b50) throw error("npz: " + path + ": a damaged central directory");
    entry e;
    e.method = static_cast<std::uint16_t>(little(zip, at + 10, 2));
    e.crc = static_cast<std::uint32_t>(little(zip, at + 16, 4));
    e.packed = little(zip, at + 20, 4);
    e.size = little(zip, at + 24, 4);
    const std::size_t name_length = little(zip, at + 28, 2), extra_length = little(zip, at + 30, 2),
                      comment_length = little(zip, at + 32, 2);
    e.offset = little(zip, at + 42, 4);
    if (at + 46 + name_length + extra_length > zip.size()) throw error("npz: " + path + " is truncated");
    e.name.assign(reinterpret_cast<const char*>(zip.data() + at + 46), name_length);
    zip64_fields(e, zip.subspan(at + 46 + name_length, extra_length), e.size == 0xffffffff, e.packed == 0xffffffff,
                 e.offset == 0xffffffff);
    entries.push_back(std::move(e));
    at += 46 + name_length + extra_length + comment_length;
  }
  return entries;
}

inline std::vector<std::byte> contents(std::span<const std::byte> zip, const entry& e, const std::string& path) {
  if (little(zip, e.offset, 4) != 0x04034b50) throw error("npz: " + path + ": " + e.name + " has no local header");
  const std::uint64_t data = e.offset + 30 + little(zip, e.offset + 26, 2) + little(zip, e.offset + 28, 2);
  if (data + e.packed > zip.size()) throw error("npz: " + path + ": " + e.name + " runs past the end of the file");
  const std::span<const std::byte> packed = zip.subspan(data, e.packed);
  std::vector<std::byte> out;
  if (e.method == 0) {
    if (e.packed != e.size) throw error("npz: " + path + ": " + e.name + " is stored with two sizes");
    out.assign(packed.begin(), packed.end());
  } else if (e.method == 8) {
    out = inflated(packed, e.size, path + ": " + e.name);
  } else {
    throw error("npz: " + path + ": " + e.name + " is compressed with zip method " + std::to_string(e.method) +
                " (stored and deflate are read)");
  }
  if (crc_of(out) != e.crc) throw error("npz: " + path + ": " + e.name + " fails its CRC check");
  return out;
}

}  // namespace detail

inline std::string array::text() const {
  if (descr_.size() < 3 || descr_[1] != 'U' || !shape_.empty()) throw error("npz: not a 0-d string array: " + descr_);
  std::string out;
  for (std::size_t at = 0; at + 4 <= bytes_.size(); at += 4) {
    const auto c = static_cast<std::uint32_t>(detail::little(bytes_, at, 4));
    if (c == 0) break;  // NumPy pads with zeros
    if (c < 0x80) {
      out += static_cast<char>(c);
    } else if (c < 0x800) {
      out += static_cast<char>(0xc0 | (c >> 6));
      out += static_cast<char>(0x80 | (c & 0x3f));
    } else if (c < 0x10000) {
      out += static_cast<char>(0xe0 | (c >> 12));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (c & 0x3f));
    } else {
      out += static_cast<char>(0xf0 | (c >> 18));
      out += static_cast<char>(0x80 | ((c >> 12) & 0x3f));
      out += static_cast<char>(0x80 | ((c >> 6) & 0x3f));
      out += static_cast<char>(0x80 | (c & 0x3f));
    }
  }
  return out;
}

inline std::vector<std::byte> file_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw error("npz: cannot open " + path);
  in.seekg(0, std::ios::end);
  std::vector<std::byte> bytes(static_cast<std::size_t>(in.tellg()));
  in.seekg(0);
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!in) throw error("npz: cannot read " + path);
  return bytes;
}

inline archive read(const std::string& path) {
  const std::vector<std::byte> zip = file_bytes(path);
  archive arrays;
  for (const detail::entry& e : detail::central_directory(zip, path)) {
    std::string name = e.name.ends_with(".npy") ? e.name.substr(0, e.name.size() - 4) : e.name;
    arrays.emplace(name, detail::parsed_npy(detail::contents(zip, e, path), path + ": " + e.name));
  }
  return arrays;
}

// A .npz of stored (uncompressed) arrays, as np.savez writes (sizes under 4 GiB).
inline void write(const std::string& path, const archive& arrays) {
  std::vector<std::byte> out, directory;
  std::uint64_t count = 0;
  for (const auto& [name, a] : arrays) {
    std::string header = "{'descr': '" + a.descr() + "', 'fortran_order': False, 'shape': (";
    for (std::size_t d : a.shape()) header += std::to_string(d) + ", ";
    if (a.shape().size() > 1) header.resize(header.size() - 2);
    if (a.shape().size() == 1) header.resize(header.size() - 1);  // "(5,)"
    header += "), }";
    header.append(63 - (10 + header.size()) % 64, ' ');  // data aligned on 64 bytes
    header += '\n';
    std::vector<std::byte> npy;
    for (int c : {0x93, int('N'), int('U'), int('M'), int('P'), int('Y'), 1, 0}) npy.push_back(std::byte(c));
    detail::put_little(npy, header.size(), 2);
    for (char c : header) npy.push_back(std::byte(c));
    npy.insert(npy.end(), a.bytes().begin(), a.bytes().end());
    if (npy.size() >= 0xffffffffu || out.size() >= 0xffffffffu) throw error("npz: write: an array of 4 GiB or more");
    const std::string file = name + ".npy";
    const std::uint32_t crc = detail::crc_of(npy);
    const auto fields = [&](std::vector<std::byte>& record) {  // shared by the local and central headers
      detail::put_little(record, 20, 2);                       // version needed
      detail::put_little(record, 0, 2);                        // flags
      detail::put_little(record, 0, 2);                        // stored
      detail::put_little(record, 0, 4);                        // time, date
      detail::put_little(record, crc, 4);
      detail::put_little(record, npy.size(), 4);
      detail::put_little(record, npy.size(), 4);
      detail::put_little(record, file.size(), 2);
      detail::put_little(record, 0, 2);  // extra
    };
    detail::put_little(directory, 0x02014b50, 4);
    detail::put_little(directory, 20, 2);  // version made by
    fields(directory);
    detail::put_little(directory, 0, 10);  // comment, disk, attributes
    detail::put_little(directory, out.size(), 4);
    for (char c : file) directory.push_back(std::byte(c));
    detail::put_little(out, 0x04034b50, 4);
    fields(out);
    for (char c : file) out.push_back(std::byte(c));
    out.insert(out.end(), npy.begin(), npy.end());
    ++count;
  }
  const std::uint64_t start = out.size();
  out.insert(out.end(), directory.begin(), directory.end());
  detail::put_little(out, 0x06054b50, 4);
  detail::put_little(out, 0, 4);
  detail::put_little(out, count, 2);
  detail::put_little(out, count, 2);
  detail::put_little(out, directory.size(), 4);
  detail::put_little(out, start, 4);
  detail::put_little(out, 0, 2);
  std::ofstream file(path, std::ios::binary);
  file.write(reinterpret_cast<const char*>(out.data()), static_cast<std::streamsize>(out.size()));
  if (!file) throw error("npz: cannot write " + path);
}

}  // namespace npz
