// SPDX-License-Identifier: MIT
// The optim layer: Adam/AdamW, SGD, gradient clipping, LR schedules, the non-finite guard.
//   #include <attn/optim.hpp>
#pragma once
#include "optim/optimizer.hpp"
#include "optim/schedule.hpp"
#include "optim/guard.hpp"
#include "optim/ema.hpp"
