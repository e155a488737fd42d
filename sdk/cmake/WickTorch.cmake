# wick_find_torch([ROOT dir]) finds the LibTorch to build against, for wick's own tree and for
# plugins built against an installed wick (wickConfig.cmake passes the LibTorch wick was built
# with). ROOT: the folder holding lib/ and share/cmake/Torch (the pytorch.org archive's
# libtorch/, the wheel's torch/), or the wheel's torch.utils.cmake_prefix_path; without it
# CMake's usual search finds one (Debian's in /usr), and a LibTorch found through
# CMAKE_PREFIX_PATH or Torch_DIR (PyTorch's convention) brings its own libraries. Sets what
# find_package(Torch) sets, and WICK_TORCH_ROOT (the root given or found that way, resolved;
# "" for a LibTorch in the system folders) and the target wick_torch_cpu (its CPU side).
macro(wick_find_torch)
  cmake_parse_arguments(WFT "" "ROOT" "" ${ARGN})
  set(WICK_TORCH_ROOT "")
  if(WFT_ROOT)
    get_filename_component(_wft_root "${WFT_ROOT}" ABSOLUTE)
    if(EXISTS "${_wft_root}/Torch/TorchConfig.cmake")  # <torch>/share/cmake
      get_filename_component(_wft_root "${_wft_root}/../.." ABSOLUTE)
    endif()
    if(NOT EXISTS "${_wft_root}/share/cmake/Torch/TorchConfig.cmake")
      message(FATAL_ERROR "${WFT_ROOT}: no LibTorch there (no share/cmake/Torch/"
        "TorchConfig.cmake); give the folder that holds lib/ and share/cmake/Torch: the "
        "pytorch.org archive's libtorch/, or the wheel's torch/ folder "
        "(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')")
    endif()
    # First on the prefix path: TorchConfig's find_library calls then take this LibTorch's
    # libraries before another one's in the system folders (Debian's libtorch-dev).
    list(PREPEND CMAKE_PREFIX_PATH "${_wft_root}")
    set(Torch_DIR "${_wft_root}/share/cmake/Torch" CACHE PATH "" FORCE)
    set(WICK_TORCH_ROOT "${_wft_root}")
  else()
    # PyTorch's documented way, -DCMAKE_PREFIX_PATH=<torch.utils.cmake_prefix_path> (or
    # Torch_DIR): the LibTorch found there keeps its libraries beside its headers. Put that
    # folder first too, or TorchConfig's find_library calls take another LibTorch's libraries
    # from the system folders first (Debian's libtorch-dev in /usr/lib).
    string(REPLACE ":" ";" _wft_env "$ENV{CMAKE_PREFIX_PATH}")
    foreach(_wft_dir ${Torch_DIR} ${CMAKE_PREFIX_PATH} ${_wft_env})
      foreach(_wft_cfg "${_wft_dir}/TorchConfig.cmake" "${_wft_dir}/Torch/TorchConfig.cmake"
                       "${_wft_dir}/share/cmake/Torch/TorchConfig.cmake")
        if(NOT WICK_TORCH_ROOT AND EXISTS "${_wft_cfg}")
          get_filename_component(_wft_found "${_wft_cfg}" DIRECTORY)
          get_filename_component(_wft_found "${_wft_found}/../../.." ABSOLUTE)  # share/cmake/Torch
          if(EXISTS "${_wft_found}/lib/libtorch.so")
            list(PREPEND CMAKE_PREFIX_PATH "${_wft_found}")
            set(WICK_TORCH_ROOT "${_wft_found}")
          endif()
        endif()
      endforeach()
    endforeach()
  endif()
  # A CUDA LibTorch compiles CUDA code for these GPUs (LibTorch's variable; its default is
  # every architecture it knows): Ampere and Hopper, with PTX that newer GPUs compile.
  if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST})
    set(TORCH_CUDA_ARCH_LIST "8.0;9.0+PTX")
  endif()
  find_package(Torch REQUIRED)
  # LibTorch's mkl.cmake lists MKL_ROOT's library folders whether they exist or not (with no
  # MKL_ROOT: /lib/intel64 and two Windows folders), which then lead every link line and run
  # path of what links LibTorch: only the folders that exist are kept.
  if(TARGET caffe2::mkl)
    get_target_property(_wft_dirs caffe2::mkl INTERFACE_LINK_DIRECTORIES)
    set(_wft_kept "")
    foreach(_wft_dir IN LISTS _wft_dirs)
      if(IS_DIRECTORY "${_wft_dir}")
        list(APPEND _wft_kept "${_wft_dir}")
      endif()
    endforeach()
    set_property(TARGET caffe2::mkl PROPERTY INTERFACE_LINK_DIRECTORIES "${_wft_kept}")
  endif()
  # wick_torch_cpu: LibTorch's CPU side (with its headers and flags), which libwick and the
  # plugins link: a CUDA LibTorch's CUDA side (torch_cuda, c10_cuda and the CUDA libraries,
  # ~0.3 s of every process start) is loaded by wick when a run asks for CUDA. A target that
  # calls LibTorch's CUDA API itself links wick_torch_cuda (below).
  if(NOT TARGET wick_torch_cpu)
    add_library(wick_torch_cpu INTERFACE IMPORTED)
    if(TARGET torch_cpu_library AND TARGET c10)
      set_target_properties(wick_torch_cpu PROPERTIES
        INTERFACE_LINK_LIBRARIES "torch_cpu_library;c10"
        INTERFACE_INCLUDE_DIRECTORIES "${TORCH_INCLUDE_DIRS}"
        INTERFACE_COMPILE_OPTIONS "${TORCH_CXX_FLAGS}")
    else()
      set_target_properties(wick_torch_cpu PROPERTIES INTERFACE_LINK_LIBRARIES "${TORCH_LIBRARIES}")
    endif()
  endif()
  # wick_torch_cuda: the CPU side and the CUDA side (torch_cuda, c10_cuda, the CUDA runtime),
  # for a program that calls LibTorch's CUDA API. It leaves out libtorch.so, a small library
  # whose exported copies of std::filesystem crashed remove_all in programs that found them
  # first (the first GPU runs). Without the CUDA side, the CPU side alone.
  if(NOT TARGET wick_torch_cuda)
    add_library(wick_torch_cuda INTERFACE IMPORTED)
    if(TARGET torch_cuda_library AND TARGET c10_cuda AND TARGET torch_cpu_library)
      set_target_properties(wick_torch_cuda PROPERTIES
        INTERFACE_LINK_LIBRARIES "wick_torch_cpu;torch_cuda_library;c10_cuda")
    else()
      set_target_properties(wick_torch_cuda PROPERTIES INTERFACE_LINK_LIBRARIES "${TORCH_LIBRARIES}")
    endif()
  endif()
  # Every LibTorch library must come from the LibTorch whose headers are compiled with.
  foreach(_wft_lib TORCH_LIBRARY C10_CUDA_LIBRARY)
    if(${_wft_lib} AND NOT ${_wft_lib} MATCHES "^${TORCH_INSTALL_PREFIX}/")
      message(FATAL_ERROR "LibTorch at ${TORCH_INSTALL_PREFIX}, but its library "
        "${${_wft_lib}} comes from elsewhere; configure with -DWICK_TORCH=${TORCH_INSTALL_PREFIX}")
    endif()
  endforeach()
endmacro()
