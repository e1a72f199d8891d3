# Warnings are errors in chorus's own programs (tests, examples, tools), never
# in a user's build: the INTERFACE targets carry no warning flags.
function(chorus_project_target target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wconversion
                                           -Wno-sign-conversion -Werror)
  target_link_libraries(${target} PRIVATE chorus::chorus)
endfunction()
