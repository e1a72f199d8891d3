# Warnings in chorus's own programs (tests, examples, tools), never in a
# user's build: the INTERFACE targets carry no warning flags. They are errors
# only with -DCHORUS_WERROR=ON, which scripts/build and CI pass; anyone who
# configures by hand (another compiler, another optimisation level, whose
# false positives we have not seen) gets warnings, not a failed build.
option(CHORUS_WERROR "Treat warnings in chorus's own programs as errors" OFF)

function(chorus_project_target target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion)
  if(CHORUS_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
  target_link_libraries(${target} PRIVATE chorus::chorus)
endfunction()
