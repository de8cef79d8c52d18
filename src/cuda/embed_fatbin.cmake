# cmake -DIN=<fatbin> -DOUT=<.cc file> -DNAME=<symbol> -DHEADER=<include> -P embed_fatbin.cmake
# Writes the fatbin as a C++ byte array, so the library carries its kernels without a data file or xxd.
# The array is 8-byte aligned: cuModuleLoadData reads the fatbin header in place.
file(READ "${IN}" hex HEX)
string(LENGTH "${hex}" n)
math(EXPR bytes "${n} / 2")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," body "${hex}")
string(REGEX REPLACE "((0x..,){16})" "\\1\n" body "${body}")
# The header declares both names extern "C", which gives these definitions external linkage.
file(WRITE "${OUT}" "// Generated from ${IN} by embed_fatbin.cmake.\n#include \"${HEADER}\"\n"
  "alignas(8) const unsigned char ${NAME}[] = {\n${body}\n};\nconst size_t ${NAME}_size = ${bytes};\n")
