#include <stdio.h>

int
main (void)
{
   printf ("flowwarden %s\n", FW_VERSION);
   return 0;
}
