# SPDX-License-Identifier: MIT
# Installs headers and an attnConfig.cmake so that `find_package(attn)` works downstream.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(DIRECTORY include/attn DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS attn attn_compiled EXPORT attnTargets)
install(EXPORT attnTargets NAMESPACE attn:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/attn)
# attn::mpi and attn::cuda each in an export set of its own (attnMpiTargets.cmake,
# attnCudaTargets.cmake), so that a consumer of attn::attn needs neither MPI nor the CUDA toolkit:
# attnConfig.cmake defines each where its dependency is found, and a consumer that needs one asks
# for it as a component: find_package(attn REQUIRED COMPONENTS mpi cuda).
set(ATTN_COMPONENTS "")
if(TARGET attn_mpi)
  install(TARGETS attn_mpi EXPORT attnMpiTargets)
  install(EXPORT attnMpiTargets NAMESPACE attn:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/attn)
  list(APPEND ATTN_COMPONENTS mpi)
endif()
if(TARGET attn_cuda)
  install(TARGETS attn_cuda EXPORT attnCudaTargets)
  install(EXPORT attnCudaTargets NAMESPACE attn:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/attn)
  list(APPEND ATTN_COMPONENTS cuda)
endif()
configure_package_config_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/attnConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/attnConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/attn)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/attnConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/attnConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/attnConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/attn)
install(FILES ${CMAKE_CURRENT_SOURCE_DIR}/LICENSE DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/attn)

# pkg-config (share/pkgconfig/attn.pc) for builds without CMake: Eigen through eigen3.pc, OpenMP, and
# the BLAS and oneDNN this build chose (their macros and the libraries' absolute paths).
set(ATTN_PC_CFLAGS "")
set(ATTN_PC_LIBS "")
if(ATTN_BLAS_LIBRARY)
  string(TOUPPER ${ATTN_BLAS_VENDOR} _attn_pc_blas)
  set(ATTN_PC_CFLAGS " -DATTN_BLAS_${_attn_pc_blas}")
  set(ATTN_PC_LIBS " ${ATTN_BLAS_LIBRARY}")
endif()
if(ATTN_DNNL_FOUND)
  string(APPEND ATTN_PC_CFLAGS " -DATTN_GEMM_DNNL")
  string(APPEND ATTN_PC_LIBS " ${ATTN_DNNL_FOUND}")
endif()
configure_file(${CMAKE_CURRENT_SOURCE_DIR}/cmake/attn.pc.in ${CMAKE_CURRENT_BINARY_DIR}/attn.pc @ONLY)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/attn.pc DESTINATION ${CMAKE_INSTALL_DATADIR}/pkgconfig)
