// Private: what an evaluation pass asks of the step engine. A batch goes through the forward
// stage (for validation also after_pred, the task's loss and after_loss) and its output is
// read back. StepEngine is the implementation; the evaluator's unit tests give their own.
#pragma once

#include "wick/task.hpp"  // Batch, Output

namespace wick {

class ForwardPass {
 public:
  // Makes `b`, moved to the run's device, the running batch and runs it: the forward stage
  // alone, or with the loss. The output and the running batch stay valid until the next call.
  virtual const Output& run_batch(Batch b, bool with_loss) = 0;
  // The running batch, as the forward saw it (its target, for metrics).
  virtual const Batch& running_batch() const = 0;

 protected:
  ~ForwardPass() = default;
};

}  // namespace wick
