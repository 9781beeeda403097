# One interface target that carries the project's warning flags; every target links it.
add_library(layertap_warnings INTERFACE)
target_compile_options(layertap_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wpedantic -Wshadow -Wconversion -Wno-sign-conversion>)
