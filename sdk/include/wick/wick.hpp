// Everything a hook plugin needs (torch-free). Task plugins also include wick/task.hpp.
#pragma once

#include "wick/checkpoint.hpp"
#include "wick/collectives.hpp"
#include "wick/context.hpp"
#include "wick/data_parallel.hpp"
#include "wick/files.hpp"
#include "wick/hook.hpp"
#include "wick/interrupt.hpp"
#include "wick/metrics.hpp"
#include "wick/params.hpp"
#include "wick/plugin.hpp"
#include "wick/points.hpp"
#include "wick/profile.hpp"
#include "wick/run.hpp"
#include "wick/state.hpp"
#include "wick/state_dict.hpp"
#include "wick/version.hpp"
