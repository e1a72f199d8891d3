// Fashion-MNIST from the IDX files of Debian's dataset-fashion-mnist
// (/usr/share/datasets/fashion-mnist/*-idx?-ubyte.gz), read with zlib.
// Images become floats normalised with the training set's mean and
// standard deviation (0.2860, 0.3530).
#pragma once

#include <zlib.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace fashion_mnist {

inline constexpr const char* default_directory = "/usr/share/datasets/fashion-mnist";
inline constexpr std::size_t pixels = 28 * 28;
inline constexpr int classes = 10;

struct split {
  std::vector<float> images;  // count x pixels, row-major
  std::vector<std::uint8_t> labels;
  std::size_t size() const { return labels.size(); }
};

inline std::vector<std::uint8_t> read_gzip(const std::string& path) {
  gzFile file = gzopen(path.c_str(), "rb");
  if (file == nullptr) throw std::runtime_error("cannot open " + path + " (install the dataset-fashion-mnist package)");
  std::vector<std::uint8_t> bytes;
  std::uint8_t chunk[1 << 16];
  int got = 0;
  while ((got = gzread(file, chunk, sizeof chunk)) > 0) bytes.insert(bytes.end(), chunk, chunk + got);
  gzclose(file);
  if (got < 0) throw std::runtime_error("corrupt gzip data in " + path);
  return bytes;
}

inline std::uint32_t big_endian(const std::vector<std::uint8_t>& bytes, std::size_t at) {
  return std::uint32_t{bytes.at(at)} << 24 | std::uint32_t{bytes.at(at + 1)} << 16 |
         std::uint32_t{bytes.at(at + 2)} << 8 | bytes.at(at + 3);
}

// IDX: magic 0x00000801 (labels) or 0x00000803 (images), then the sizes.
inline split load(const std::string& directory, const std::string& prefix) {
  const auto images = read_gzip(directory + "/" + prefix + "-images-idx3-ubyte.gz");
  const auto labels = read_gzip(directory + "/" + prefix + "-labels-idx1-ubyte.gz");
  if (big_endian(images, 0) != 0x803 || big_endian(labels, 0) != 0x801)
    throw std::runtime_error("not IDX files: " + directory + "/" + prefix);
  const std::size_t count = big_endian(labels, 4);
  if (big_endian(images, 4) != count || big_endian(images, 8) * big_endian(images, 12) != pixels ||
      images.size() != 16 + count * pixels || labels.size() != 8 + count)
    throw std::runtime_error("inconsistent IDX sizes in " + directory + "/" + prefix);
  split data;
  data.labels.assign(labels.begin() + 8, labels.end());
  data.images.resize(count * pixels);
  constexpr float mean = 0.2860f, deviation = 0.3530f;
  for (std::size_t i = 0; i < data.images.size(); ++i)
    data.images[i] = (static_cast<float>(images[16 + i]) / 255.0f - mean) / deviation;
  return data;
}

}  // namespace fashion_mnist
