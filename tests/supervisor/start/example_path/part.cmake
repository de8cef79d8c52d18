# The start path "example" (path.cc): it has no part of its own.
target_sources(${FR_PART_TARGET} PRIVATE ${CMAKE_CURRENT_LIST_DIR}/path.cc)
