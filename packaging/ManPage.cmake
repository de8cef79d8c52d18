# Renders one man page with pandoc and compresses it (gzip -9n: no name or time stamp, so the build is
# reproducible, as Debian policy asks). Run as a script by the man_pages target of packaging/Packaging.cmake:
#   cmake -DPANDOC=... -DGZIP=... -DOUT=fastrestartd.8.gz -DVERSION=0.1.0 -DSOURCES=a.md,b.md -P ManPage.cmake
# SOURCES (comma-separated) are concatenated. A source that is a project doc (not under docs/man/) loses its
# title line and its "## " sections become man sections, so docs/config.md reads as the body of fastrestart.toml(5).
foreach(v PANDOC GZIP OUT VERSION SOURCES)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "ManPage.cmake: ${v} is not set")
  endif()
endforeach()

string(REPLACE "," ";" SOURCES "${SOURCES}")
set(text "")
foreach(src IN LISTS SOURCES)
  file(READ "${src}" body)
  if(NOT src MATCHES "/docs/man/")
    string(REGEX REPLACE "^# [^\n]*\n" "" body "${body}")
    string(REGEX REPLACE "(^|\n)## " "\\1# " body "${body}")
  endif()
  string(APPEND text "${body}\n")
endforeach()
get_filename_component(name "${OUT}" NAME)
string(REGEX REPLACE "\\.gz$" "" page "${OUT}")
file(WRITE "${page}.md" "${text}")
execute_process(
  COMMAND "${PANDOC}" --standalone --from markdown --to man --metadata "footer=fastrestart ${VERSION}"
          --lua-filter "${CMAKE_CURRENT_LIST_DIR}/man-tables.lua"
          --include-before-body "${CMAKE_CURRENT_LIST_DIR}/man-before.roff"
          --output "${page}" "${page}.md"
  RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "pandoc failed for ${name}: ${err}")
endif()
execute_process(COMMAND "${GZIP}" -9 -n -f "${page}" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "gzip failed for ${name}")
endif()
file(REMOVE "${page}.md")
