# What `cmake --install` puts where, and the DEB package `cpack -G DEB` builds from it.
# Included from CMakeLists.txt once the flowwarden target exists. Only the binary, the
# documentation, the example scripts and the systemd unit are installed: the Lua library is
# embedded in the binary (cmake/embed_lua.cmake), and benchmarks and tests stay in the build tree.
include(GNUInstallDirs)

install(TARGETS flowwarden RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# The documentation keeps the source tree's layout (README.md, docs/, examples/) so that its
# relative links still work where it is installed.
file(GLOB FW_DOC_FILES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/docs/*.md)
install(FILES ${CMAKE_SOURCE_DIR}/README.md ${CMAKE_SOURCE_DIR}/LICENSE
        DESTINATION ${CMAKE_INSTALL_DOCDIR})
install(FILES ${FW_DOC_FILES} DESTINATION ${CMAKE_INSTALL_DOCDIR}/docs)
install(DIRECTORY ${CMAKE_SOURCE_DIR}/examples/ DESTINATION ${CMAKE_INSTALL_DOCDIR}/examples
        FILES_MATCHING PATTERN "*.lua")

# The unit names the installed binary, whose directory is known only at install time
# (`cmake --install --prefix P`, or /usr when CPack stages the DEB), so the template is filled
# in then, in a scratch file per prefix and destination so that concurrent installs from one
# build tree into different places (cpack stages in a fresh DESTDIR) never mix their units.
set(FW_UNIT_TEMPLATE ${CMAKE_SOURCE_DIR}/examples/flowwarden.service.in)
set(FW_UNIT_DIR lib/systemd/system)
install(CODE "
  set(FW_INSTALL_BINDIR \"${CMAKE_INSTALL_BINDIR}\")
  if(NOT IS_ABSOLUTE \"\${FW_INSTALL_BINDIR}\")
    set(FW_INSTALL_BINDIR \"\${CMAKE_INSTALL_PREFIX}/\${FW_INSTALL_BINDIR}\")
  endif()
  string(MD5 fw_unit_key \"\${CMAKE_INSTALL_PREFIX}|\$ENV{DESTDIR}\")
  set(fw_unit \"${CMAKE_BINARY_DIR}/systemd-unit/\${fw_unit_key}/flowwarden.service\")
  configure_file(\"${FW_UNIT_TEMPLATE}\" \"\${fw_unit}\" @ONLY)
  file(INSTALL DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${FW_UNIT_DIR}\" TYPE FILE
       FILES \"\${fw_unit}\")
  file(REMOVE_RECURSE \"${CMAKE_BINARY_DIR}/systemd-unit/\${fw_unit_key}\")
")

# --- the DEB ----------------------------------------------------------------
set(FW_PACKAGE_MAINTAINER "flowwarden maintainers <maintainers@flowwarden.invalid>"
    CACHE STRING "Maintainer field of the DEB package")

set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME flowwarden)
set(CPACK_PACKAGE_VENDOR "flowwarden")
set(CPACK_PACKAGE_CONTACT "${FW_PACKAGE_MAINTAINER}")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "MongoDB change streams handled by Lua scripts, with retries and a dead-letter queue")
set(CPACK_RESOURCE_FILE_LICENSE ${CMAKE_SOURCE_DIR}/LICENSE)
set(CPACK_RESOURCE_FILE_README ${CMAKE_SOURCE_DIR}/README.md)
# CPack stages the DEB by installing with this prefix into a DESTDIR, so the packaged unit
# runs /usr/bin/flowwarden. (CPACK_SET_DESTDIR ON would install with CMAKE_INSTALL_PREFIX,
# /usr/local, instead.)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_STRIP_FILES ON)

set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_MAINTAINER "${FW_PACKAGE_MAINTAINER}")
set(CPACK_DEBIAN_PACKAGE_SECTION database)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# The summary above is the first line of the Description field; this is the rest.
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "flowwarden runs an operator's Lua 5.4 script against MongoDB change streams: it calls the
script's handlers for every insert, update, replace or delete, in order, checkpoints its
position so a restart loses nothing, retries failed events and stores those that keep failing
in a dead-letter queue. Handlers can write MongoDB and call web hooks. Includes a systemd unit
(not enabled) and example scripts.")

# dpkg-shlibdeps (package dpkg-dev, with `file`, which CPack uses to find the ELF files) derives
# Depends from the libraries the binary links. Without it, the list below is what
# `readelf -d flowwarden` needs on bookworm, each library mapped to its package with `dpkg -S`.
find_program(FW_DPKG_SHLIBDEPS dpkg-shlibdeps)
find_program(FW_FILE_PROGRAM file)
if(FW_DPKG_SHLIBDEPS AND FW_FILE_PROGRAM)
  set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
else()
  message(STATUS "dpkg-shlibdeps or file not found: the DEB's Depends is a fixed list")
  set(CPACK_DEBIAN_PACKAGE_DEPENDS
      "libc6, libmongoc-1.0-0, libbson-1.0-0, liblua5.4-0, lua-cjson, libcurl4, libmicrohttpd12, libhiredis0.14, libpq5")
endif()

# `install` and `cpack` package what was built and never build anything
# themselves: the package test runs cpack while other tests run the binary,
# which a rebuild would replace under them. Build first, then package.
set(CMAKE_SKIP_INSTALL_ALL_DEPENDENCY TRUE)
include(CPack)
