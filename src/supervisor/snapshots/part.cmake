# The start path "snapshot" (path.cc) and its part, the Snapshots (snapshots.h). Read by
# src/supervisor/CMakeLists.txt, which reads every <folder>/part.cmake into FR_PART_TARGET.
target_sources(${FR_PART_TARGET} PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/path.cc ${CMAKE_CURRENT_LIST_DIR}/snapshots.cc ${CMAKE_CURRENT_LIST_DIR}/snapshots_control.cc)
