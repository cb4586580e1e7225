// The optim layer: Adam/AdamW, SGD, gradient clipping, LR schedules.
//   #include <attn/optim.hpp>
#pragma once
#include "optim/optimizer.hpp"
#include "optim/schedule.hpp"
