/* api_exit.h: the teardown's fast path at a driver API exit (callbacks.cpp), apart
 * from ga_internal.h so that the header every unit includes calls into no unit.
 * teardown.cpp holds the state and the slow path, and does not include this. */
#ifndef GA_API_EXIT_H
#define GA_API_EXIT_H

#include "ga_internal.h"

/* At every launch's API exit: finalize when the poller asked (teardown.cpp). */
static inline void ga_teardown_at_api_exit(void) noexcept {
    if (GA_UNLIKELY(ga_td_state.load(std::memory_order_relaxed) == GA_TD_REQUESTED))
        ga_teardown_at_api_exit_slow();
}

#endif
