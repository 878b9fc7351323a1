// Clean.
#include <string>
