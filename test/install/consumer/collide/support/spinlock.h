// A header of the consumer's own that shares its path with one of depengine's (support/spinlock.h): common names. The
// consumer puts this folder first on its include path; depengine's headers include theirs through <depengine/...> and
// must never reach this one.
#error "a depengine header included the consumer's own support/spinlock.h"
