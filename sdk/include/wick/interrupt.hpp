// Whether a stop signal came (SDK 2.7): the first SIGINT, SIGTERM, SIGHUP or SIGUSR1 during a
// fit asks it to stop at the next step boundary. A hook that waits or loops for long (an
// upload, a poll) checks this to return early; the trainer itself stops the fit.
#pragma once

#include "wick/version.hpp"

WICK_PUBLIC_BEGIN

namespace wick {

bool interrupt_requested();
int interrupt_signal();  // the signal that asked (0: none)

}  // namespace wick

WICK_PUBLIC_END
