# Finds what chorus needs (UCX, Boost headers, threads) and what it can use
# (CUDA, NCCL, PMIx, SimGrid), honouring CHORUS_WITH_CUDA, _NCCL, _PMIX and
# _SIMGRID = AUTO|ON|OFF.
find_package(Threads REQUIRED)
# UCX: Debian's libucx-dev (1.13, host memory only) or PyPI's libucx-cu13
# (1.22, built with CUDA: -Ducx_DIR=<wheel>/libucx/lib/cmake/ucx or
# CMAKE_PREFIX_PATH=<wheel>/libucx; scripts/ucx-wheel installs it). The
# wheel's libucp names its build machine in its RPATH, so chorus links
# libuct too, and its programs find the libraries by CMake's build RPATH.
find_package(ucx REQUIRED CONFIG)
message(STATUS "chorus: UCX ${ucx_VERSION} from ${ucx_DIR}")
set(CHORUS_UCX_VERSION ${ucx_VERSION} CACHE INTERNAL "the UCX chorus builds against")
find_package(Boost 1.70 REQUIRED CONFIG COMPONENTS headers)

function(chorus_check_switch name)
  if(NOT ${name} MATCHES "^(AUTO|ON|OFF)$")
    message(FATAL_ERROR "${name}=${${name}}: expected AUTO, ON or OFF")
  endif()
endfunction()
chorus_check_switch(CHORUS_WITH_CUDA)
chorus_check_switch(CHORUS_WITH_NCCL)
chorus_check_switch(CHORUS_WITH_PMIX)
chorus_check_switch(CHORUS_WITH_SIMGRID)

# chorus_optional_package(SWITCH MODULE PREFIX RESULT): whether pkg-config
# finds MODULE (its target PkgConfig::PREFIX), honouring SWITCH (AUTO|ON|OFF).
function(chorus_optional_package switch module prefix result)
  set(found OFF)
  if(NOT ${switch} STREQUAL "OFF")
    find_package(PkgConfig QUIET)
    if(PkgConfig_FOUND)
      pkg_check_modules(${prefix} QUIET IMPORTED_TARGET GLOBAL ${module})
      set(found ${${prefix}_FOUND})
    endif()
    if(${switch} STREQUAL "ON" AND NOT found)
      message(FATAL_ERROR "${switch}=ON but ${module} was not found (pkg-config ${module})")
    endif()
  endif()
  set(${result} ${found} PARENT_SCOPE)
endfunction()

# PMIx (Debian's libpmix-dev): the launchers' bootstrap (bootstrap/pmix.hpp).
# Without it chorus starts from its store alone.
chorus_optional_package(CHORUS_WITH_PMIX pmix PMIX CHORUS_HAVE_PMIX)
# SimGrid (Debian's libsimgrid-dev): the simulated transport (sim/).
chorus_optional_package(CHORUS_WITH_SIMGRID simgrid SIMGRID CHORUS_HAVE_SIMGRID)

set(CHORUS_HAVE_CUDA OFF)
if(NOT CHORUS_WITH_CUDA STREQUAL "OFF")
  if(NOT CUDAToolkit_ROOT AND EXISTS /usr/local/cuda)
    set(CUDAToolkit_ROOT /usr/local/cuda)
  endif()
  if(CHORUS_WITH_CUDA STREQUAL "ON")
    find_package(CUDAToolkit REQUIRED)
  else()
    find_package(CUDAToolkit QUIET)
  endif()
  set(CHORUS_HAVE_CUDA ${CUDAToolkit_FOUND})
endif()

set(CHORUS_HAVE_NCCL OFF)
if(NOT CHORUS_WITH_NCCL STREQUAL "OFF" AND CHORUS_HAVE_CUDA)
  find_path(CHORUS_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(CHORUS_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
  if(CHORUS_NCCL_INCLUDE_DIR AND CHORUS_NCCL_LIBRARY)
    set(CHORUS_HAVE_NCCL ON)
  endif()
endif()
if(CHORUS_WITH_NCCL STREQUAL "ON" AND NOT CHORUS_HAVE_NCCL)
  message(FATAL_ERROR "CHORUS_WITH_NCCL=ON but NCCL (and CUDA) were not found")
endif()
message(STATUS "chorus: CUDA ${CHORUS_HAVE_CUDA}, NCCL ${CHORUS_HAVE_NCCL}, PMIx ${CHORUS_HAVE_PMIX}, "
               "SimGrid ${CHORUS_HAVE_SIMGRID}")
