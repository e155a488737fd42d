# cmake -DNM=... -DLIB=libwick.so -P exports.cmake: libwick's dynamic symbol table holds what
# the public headers declare and none of its internals (it is built with hidden visibility).
execute_process(COMMAND ${NM} -D -C --defined-only ${LIB} OUTPUT_VARIABLE syms RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "${NM} failed on ${LIB}")
endif()
# The SDK's and the host API's: a Context service, a Params reader, Trainer::fit.
foreach(public "wick::Context::model()" "wick::Params::get_int(" "wick::Trainer::fit()")
  string(FIND "${syms}" "${public}" at)
  if(at EQUAL -1)
    message(FATAL_ERROR "${LIB} does not export ${public}")
  endif()
endforeach()
# The loop's internals: the Trainer's state, the dispatcher, the records writer, the loader.
foreach(internal "wick::Trainer::Impl::" "wick::Config::Impl::" "wick::Params::Impl::"
                 "wick::StateDict::Impl::" "wick::Dispatcher::" "wick::RecordWriter::"
                 "wick::BatchLoader::" "wick::DataParallel::")
  string(FIND "${syms}" "${internal}" at)
  if(NOT at EQUAL -1)
    message(FATAL_ERROR "${LIB} exports internals: ${internal}...")
  endif()
endforeach()
message(STATUS "libwick exports its interface only")
