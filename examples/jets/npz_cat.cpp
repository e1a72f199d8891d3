// Prints what npz::read finds in a .npz: each array's name, type, shape and
// values (numbers as %.17g, strings as text), one array a line. The reader's
// test compares it with NumPy's view of the same file; --copy OUT writes the
// arrays back with npz::write, for the writer's.
#include "npz.hpp"

#include <cstdio>
#include <string>

namespace {

template <class T>
void print_values(const npz::array& a) {
  for (T value : a.values<T>()) std::printf(" %.17g", static_cast<double>(value));
}

void print(const std::string& name, const npz::array& a) {
  std::printf("%s %s (", name.c_str(), a.descr().c_str());
  for (std::size_t d : a.shape()) std::printf("%zu,", d);
  std::printf(")");
  const std::string& d = a.descr();
  if (d == "<f4")
    print_values<float>(a);
  else if (d == "<f8")
    print_values<double>(a);
  else if (d == "|u1")
    print_values<std::uint8_t>(a);
  else if (d == "<i4")
    print_values<std::int32_t>(a);
  else if (d == "<i8")
    print_values<std::int64_t>(a);
  else
    std::printf(" %s", a.text().c_str());
  std::printf("\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2 && !(argc == 4 && std::string(argv[2]) == "--copy")) {
    std::fprintf(stderr, "usage: npz_cat FILE.npz [--copy OUT.npz]\n");
    return 2;
  }
  try {
    const npz::archive arrays = npz::read(argv[1]);
    for (const auto& [name, a] : arrays) print(name, a);
    if (argc == 4) npz::write(argv[3], arrays);
  } catch (const npz::error& failure) {
    std::fprintf(stderr, "npz_cat: %s\n", failure.what());
    return 1;
  }
}
