/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * nxl's NIXL compatibility layer: NIXL's tagged serializer (nixlSerDes), as
 * NIXL programs use it to pass descriptor lists between processes. Its
 * text is this library's own: it is read by this library only.
 */
#ifndef NIXL_SRC_UTILS_SERDES_SERDES_H
#define NIXL_SRC_UTILS_SERDES_SERDES_H

#include <cstdint>
#include <string>
#include <sys/types.h>

#include "nixl_types.h"

class nixlSerDes {
private:
    typedef enum { SERIALIZE, DESERIALIZE } ser_mode_t;

    std::string workingStr;
    ssize_t des_offset;
    ser_mode_t mode;

public:
    nixlSerDes();

    nixl_status_t addStr(const std::string &tag, const std::string &str);
    std::string getStr(const std::string &tag);

    nixl_status_t addBuf(const std::string &tag, const void *buf, ssize_t len);
    ssize_t getBufLen(const std::string &tag) const;
    nixl_status_t getBuf(const std::string &tag, void *buf, ssize_t len);

    std::string exportStr() const;
    nixl_status_t importStr(const std::string &sdbuf);

    static std::string _bytesToString(const void *buf, ssize_t size);
    static void _stringToBytes(void *fill_buf, const std::string &s, ssize_t size);
};

#endif
