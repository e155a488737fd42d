// The built-in metric plugins, one library (wicklib_metrics.so): classification metrics from
// counts and a confusion matrix, AUROC from every sample's scores, regression metrics from
// sums, each over the whole split and exact across data-parallel ranks (the framework sums
// the states, and joins AUROC's rows, before compute()).
#include <wick/plugin.hpp>

#include "classification.hpp"
#include "ranking.hpp"
#include "regression.hpp"

namespace {
using namespace wick_metrics;
const std::vector<std::string> kAverages = {"macro", "micro", "weighted"};
const char* const kAverageHelp =
    "macro: the mean over classes; micro: from the summed counts (= accuracy for one label "
    "per sample); weighted: the mean weighted by each class's true count";
}  // namespace

WICK_PLUGINS(
    WICK_ENTRY(TopK, wick::PluginDef("accuracy", "1.0.0",
                                     "the share of samples whose highest score is the target")),
    WICK_ENTRY(TopK, wick::PluginDef("top_k_accuracy", "1.0.0",
                                     "the share of samples with the target among the k highest "
                                     "scores")
                         .param_int("k", 5, "how many of the highest scores count")),
    WICK_ENTRY(Precision, wick::PluginDef("precision", "1.0.0",
                                          "of the samples predicted as a class, the share that "
                                          "are (TP / (TP + FP))")
                              .param_choice("average", kAverages, "macro", kAverageHelp)),
    WICK_ENTRY(Recall, wick::PluginDef("recall", "1.0.0",
                                       "of the samples of a class, the share predicted as it (TP "
                                       "/ (TP + FN))")
                           .param_choice("average", kAverages, "macro", kAverageHelp)),
    WICK_ENTRY(F1, wick::PluginDef("f1", "1.0.0",
                                   "the harmonic mean of precision and recall (2TP / (2TP + FP "
                                   "+ FN))")
                       .param_choice("average", kAverages, "macro", kAverageHelp)),
    WICK_ENTRY(ConfusionMatrix,
               wick::PluginDef("confusion_matrix", "1.0.0",
                               "counts of (true, predicted) class pairs, written to NAME.csv in "
                               "the run folder at each validation")),
    WICK_ENTRY(Auroc,
               wick::PluginDef("auroc", "1.0.0",
                               "area under the ROC curve: binary (class 1's score against class "
                               "0's), or one class against the rest, averaged over classes "
                               "(macro); exact, from every sample's scores")),
    WICK_ENTRY(Mae, wick::PluginDef("mae", "1.0.0", "mean absolute error")),
    WICK_ENTRY(Mse, wick::PluginDef("mse", "1.0.0", "mean squared error")),
    WICK_ENTRY(Rmse, wick::PluginDef("rmse", "1.0.0", "root mean squared error")),
    WICK_ENTRY(R2,
               wick::PluginDef("r2", "1.0.0", "coefficient of determination, 1 - SS_res / SS_tot")))
