#include <stdio.h>
int cmd_pingpong(int argc, char **argv) { (void)argc; (void)argv; return 0; }
