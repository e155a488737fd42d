// Collective operations across data-parallel processes, as one interface: a data-parallel
// plugin implements it and installs it on the Context (Context::set_collectives) in
// before_fit; the trainer and other plugins use it through the Context. Without one
// installed, a run is one process and every operation is local.
#pragma once

#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace at {
class Tensor;
}

namespace wick {

class Collectives {
 public:
  virtual ~Collectives() = default;
  // Sums t over all processes, in place. t is a float64 CPU tensor of the same size on every
  // process, and every process calls this at the same point of the run.
  virtual void all_reduce_sum(at::Tensor& t) = 0;
  // Returns when every process has called it.
  virtual void barrier() = 0;
  // Whether all processes stop now, given this process's own stop request: a hook's, or a stop
  // signal it got (wick/interrupt.hpp; passed where an accumulation window ends). Called by the
  // trainer on every process after every training step (epoch_end false), and before each
  // epoch's first step and after every epoch (true: a point where every process must exchange
  // its request); true on one process must become true on all, at the same step. When it
  // is, and after each epoch's training and its after_epoch, the trainer asks the processes
  // (all_reduce_sum) whether any got a stop signal, to end all of them interrupted.
  virtual bool agree_stop(bool local_stop, bool epoch_end) = 0;
};

}  // namespace wick

WICK_PUBLIC_END
