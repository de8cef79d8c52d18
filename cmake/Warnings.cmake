# Warnings for first-party code only: link fr_warnings, never put these on third-party targets.
add_library(fr_warnings INTERFACE)
target_compile_options(fr_warnings INTERFACE
  -Wall -Wextra -Wpedantic -Wshadow -Wnon-virtual-dtor -Wold-style-cast -Wcast-align
  -Woverloaded-virtual -Wconversion -Wno-sign-conversion -Wformat=2 -Wimplicit-fallthrough)
