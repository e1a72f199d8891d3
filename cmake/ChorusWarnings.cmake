# Warnings in chorus's own programs (tests, examples, tools), never in a
# user's build: the INTERFACE targets carry no warning flags. They are errors
# only with -DCHORUS_WERROR=ON, which scripts/build and CI pass; anyone who
# configures by hand (another compiler, another optimisation level, whose
# false positives we have not seen) gets warnings, not a failed build.
option(CHORUS_WERROR "Treat warnings in chorus's own programs as errors" OFF)

function(chorus_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion)
  if(CHORUS_WERROR)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

# The project's programs link chorus::runtime, as the README advises users;
# the header-only form is built by tests/package (the consumer project).
function(chorus_project_target target)
  chorus_warnings(${target})
  target_link_libraries(${target} PRIVATE chorus::runtime)
endfunction()
