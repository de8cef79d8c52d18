# FASTRESTART_SANITIZE: build everything with sanitizers, for scripts/sanitize.sh (docs/reliability.md).
#   -DFASTRESTART_SANITIZE=address,undefined   ASan + UBSan (unit and end-to-end tests)
#   -DFASTRESTART_SANITIZE=thread              TSan (the threaded reader, daemon and loader tests)
# Every finding aborts (no recovery), so a test or a child process fails where the bug is.
set(FASTRESTART_SANITIZE "" CACHE STRING "Sanitizers to build with: address,undefined | thread | empty")
if(FASTRESTART_SANITIZE)
  add_compile_options(-fsanitize=${FASTRESTART_SANITIZE} -fno-sanitize-recover=all -fno-omit-frame-pointer)
  add_link_options(-fsanitize=${FASTRESTART_SANITIZE} -fno-sanitize-recover=all)
  message(STATUS "fastrestart: sanitizers ${FASTRESTART_SANITIZE}")
endif()
