# chorus_libtorch: the LibTorch a torch wheel ships, for the C++ jet tagger.
# The wheel's own CMake config (torch.utils.cmake_prefix_path) also sets up
# CUDA and the pip nvidia libraries, which fails or warns on machines
# without a matching CUDA toolkit; the tagger needs only torch's CPU
# libraries, so this target takes those from the same wheel: its headers,
# libtorch_cpu and libc10, and the C++ ABI torch was built with.
set(CHORUS_TORCH_PYTHON "${PROJECT_SOURCE_DIR}/.venv/bin/python" CACHE FILEPATH
    "The Python whose torch wheel the LibTorch examples build against")
if(NOT EXISTS "${CHORUS_TORCH_PYTHON}")
  message(STATUS "chorus: no ${CHORUS_TORCH_PYTHON} (scripts/python-env makes it): the LibTorch examples are not built")
  return()
endif()
execute_process(
  COMMAND "${CHORUS_TORCH_PYTHON}" -c
          "import torch, torch.utils; print(torch.utils.cmake_prefix_path); print(int(torch._C._GLIBCXX_USE_CXX11_ABI)); print(torch.__version__)"
  OUTPUT_VARIABLE torch_facts ERROR_QUIET RESULT_VARIABLE torch_found OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT torch_found EQUAL 0)
  message(STATUS "chorus: ${CHORUS_TORCH_PYTHON} has no torch: the LibTorch examples are not built")
  return()
endif()
string(REPLACE "\n" ";" torch_facts "${torch_facts}")
list(GET torch_facts 0 torch_cmake_prefix)
list(GET torch_facts 1 torch_cxx11_abi)
list(GET torch_facts 2 torch_version)
get_filename_component(torch_root "${torch_cmake_prefix}/../.." ABSOLUTE)  # <site-packages>/torch
find_library(CHORUS_TORCH_CPU torch_cpu PATHS "${torch_root}/lib" NO_DEFAULT_PATH)
find_library(CHORUS_C10 c10 PATHS "${torch_root}/lib" NO_DEFAULT_PATH)
if(NOT CHORUS_TORCH_CPU OR NOT CHORUS_C10 OR NOT EXISTS "${torch_root}/include/torch/csrc/api/include/torch/torch.h")
  message(STATUS "chorus: the torch wheel at ${torch_root} has no LibTorch headers or libraries")
  return()
endif()
add_library(chorus_libtorch INTERFACE)
target_include_directories(chorus_libtorch SYSTEM INTERFACE "${torch_root}/include"
                                                            "${torch_root}/include/torch/csrc/api/include")
target_link_libraries(chorus_libtorch INTERFACE "${CHORUS_TORCH_CPU}" "${CHORUS_C10}")
target_compile_definitions(chorus_libtorch INTERFACE _GLIBCXX_USE_CXX11_ABI=${torch_cxx11_abi})
message(STATUS "chorus: LibTorch ${torch_version} from ${torch_root}")
