# Installs the chorus build tree into a scratch prefix, then builds and runs
# the consumer project twice: through find_package and add_subdirectory.
foreach(variable CHORUS_SOURCE_DIR CHORUS_BUILD_DIR WORK_DIR)
  if(NOT ${variable})
    message(FATAL_ERROR "${variable} is required")
  endif()
endforeach()
file(REMOVE_RECURSE ${WORK_DIR})
set(consumer ${CHORUS_SOURCE_DIR}/tests/package)

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "failed (${result}): ${ARGN}\n${output}")
  endif()
  message(STATUS "${output}")
endfunction()

run(${CMAKE_COMMAND} --install ${CHORUS_BUILD_DIR} --prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} -S ${consumer} -B ${WORK_DIR}/installed -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --build ${WORK_DIR}/installed)
run(${WORK_DIR}/installed/consumer)
run(${WORK_DIR}/installed/core_only)

run(${CMAKE_COMMAND} -S ${consumer} -B ${WORK_DIR}/subdirectory -DCHORUS_FROM_SOURCE=${CHORUS_SOURCE_DIR})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/subdirectory --target consumer core_only)
run(${WORK_DIR}/subdirectory/consumer)
run(${WORK_DIR}/subdirectory/core_only)
