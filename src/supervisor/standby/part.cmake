# The start path "standby" (path.cc) and its part, the Standby (standby.h), with its pieces. Read by
# src/supervisor/CMakeLists.txt, which reads every <folder>/part.cmake into FR_PART_TARGET.
target_sources(${FR_PART_TARGET} PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/path.cc ${CMAKE_CURRENT_LIST_DIR}/standby.cc ${CMAKE_CURRENT_LIST_DIR}/standby_exit.cc
  ${CMAKE_CURRENT_LIST_DIR}/standby_release.cc ${CMAKE_CURRENT_LIST_DIR}/standby_memory.cc ${CMAKE_CURRENT_LIST_DIR}/streak.cc
  ${CMAKE_CURRENT_LIST_DIR}/stale.cc ${CMAKE_CURRENT_LIST_DIR}/gate_message.cc ${CMAKE_CURRENT_LIST_DIR}/model_files.cc)
