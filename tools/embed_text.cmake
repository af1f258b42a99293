# Writes the text file IN as the C string gp__pytorch_rules into OUT (cmake -P).
file(READ ${IN} text)
string(REPLACE "\\" "\\\\" text "${text}")
string(REPLACE "\"" "\\\"" text "${text}")
string(REPLACE "\n" "\\n\"\n    \"" text "${text}")
file(WRITE ${OUT} "/* Generated from ${IN}; do not edit. */\nconst char gp__pytorch_rules[] =\n    \"${text}\";\n")
