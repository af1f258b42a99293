# Writes the text file IN as the C string NAME into the C file OUT (cmake -P), byte for byte:
#   cmake -DIN=file.txt -DOUT=file.c -DNAME=gp__some_text -P embed_text.cmake
# gives `const char gp__some_text[] = "...";` (sizeof - 1 is the file's length). Backslashes and
# quotes are escaped, each line ends with \n and a new literal, and every '?' is written \? so no
# trigraph can form. Used by the engine (the built-in frame rules) and the renderers (the HTML
# page's stylesheet and script).
if(NOT DEFINED IN OR NOT DEFINED OUT OR NOT DEFINED NAME)
  message(FATAL_ERROR "embed_text.cmake needs -DIN=, -DOUT= and -DNAME=")
endif()
file(READ ${IN} text)
string(REPLACE "\\" "\\\\" text "${text}")
string(REPLACE "\"" "\\\"" text "${text}")
string(REPLACE "?" "\\?" text "${text}")
string(REPLACE "\n" "\\n\"\n    \"" text "${text}")
file(WRITE ${OUT} "/* Generated from ${IN}; do not edit. */\nconst char ${NAME}[] =\n    \"${text}\";\n")
