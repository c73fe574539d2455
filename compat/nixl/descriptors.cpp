/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * libnxl-nixl: NIXL's descriptors, descriptor lists, serializer and enum
 * strings. The serialized forms are this library's own: lists written by
 * one process are read by another process running this library.
 */
#include <cstring>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <type_traits>

#include "internal.h"
#include "nixl_descriptors.h"
#include "test_utils.h"
#include "utils/serdes/serdes.h"

const std::string default_metadata_label = "metadata";
const std::string default_partial_metadata_label = "partial";
const std::string nixl_null_agent = "nixl_null_agent";

/* ------------------------------------------------------------ enum strings */

std::string nixlEnumStrings::memTypeStr(const nixl_mem_t &mem) {
    switch (mem) {
    case DRAM_SEG: return "DRAM_SEG";
    case VRAM_SEG: return "VRAM_SEG";
    case BLK_SEG: return "BLK_SEG";
    case OBJ_SEG: return "OBJ_SEG";
    case FILE_SEG: return "FILE_SEG";
    }
    return "BAD_SEG";
}

std::string nixlEnumStrings::xferOpStr(const nixl_xfer_op_t &op) {
    switch (op) {
    case NIXL_READ: return "READ";
    case NIXL_WRITE: return "WRITE";
    }
    return "BAD_OP";
}

std::string nixlEnumStrings::statusStr(const nixl_status_t &status) {
    switch (status) {
    case NIXL_IN_PROG: return "NIXL_IN_PROG";
    case NIXL_SUCCESS: return "NIXL_SUCCESS";
    case NIXL_ERR_NOT_POSTED: return "NIXL_ERR_NOT_POSTED";
    case NIXL_ERR_INVALID_PARAM: return "NIXL_ERR_INVALID_PARAM";
    case NIXL_ERR_BACKEND: return "NIXL_ERR_BACKEND";
    case NIXL_ERR_NOT_FOUND: return "NIXL_ERR_NOT_FOUND";
    case NIXL_ERR_MISMATCH: return "NIXL_ERR_MISMATCH";
    case NIXL_ERR_NOT_ALLOWED: return "NIXL_ERR_NOT_ALLOWED";
    case NIXL_ERR_REPOST_ACTIVE: return "NIXL_ERR_REPOST_ACTIVE";
    case NIXL_ERR_UNKNOWN: return "NIXL_ERR_UNKNOWN";
    case NIXL_ERR_NOT_SUPPORTED: return "NIXL_ERR_NOT_SUPPORTED";
    case NIXL_ERR_REMOTE_DISCONNECT: return "NIXL_ERR_REMOTE_DISCONNECT";
    case NIXL_ERR_CANCELED: return "NIXL_ERR_CANCELED";
    case NIXL_ERR_NO_TELEMETRY: return "NIXL_ERR_NO_TELEMETRY";
    }
    return "BAD_STATUS";
}

/* ------------------------------------------------------------- test utils */

void nixl_exit_on_failure(nixl_status_t status, std::string_view message, std::string_view agent) {
    if (status >= NIXL_SUCCESS)
        return;
    std::cerr << message << (agent.empty() ? "" : " for agent ") << agent << ": "
              << nixlEnumStrings::statusStr(status) << std::endl;
    std::exit(EXIT_FAILURE);
}

void nixl_exit_on_failure(bool condition, std::string_view message, std::string_view agent) {
    if (condition)
        return;
    std::cerr << message << (agent.empty() ? "" : " for agent ") << agent << std::endl;
    std::exit(EXIT_FAILURE);
}

/* ------------------------------------------------------------- serializer
 *
 * A record is: tag, '\0', the payload length as 8 little-endian bytes, the
 * payload. The reader takes records in the order they were written. */

nixlSerDes::nixlSerDes() : des_offset(0), mode(SERIALIZE) {}

static void put_u64(std::string &s, uint64_t v) {
    for (int i = 0; i < 8; i++)
        s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

static uint64_t get_u64(const char *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= static_cast<uint64_t>(static_cast<unsigned char>(p[i])) << (8 * i);
    return v;
}

nixl_status_t nixlSerDes::addStr(const std::string &tag, const std::string &str) {
    return addBuf(tag, str.data(), static_cast<ssize_t>(str.size()));
}

nixl_status_t nixlSerDes::addBuf(const std::string &tag, const void *buf, ssize_t len) {
    if (len < 0 || (len > 0 && !buf) || tag.find('\0') != std::string::npos) {
        nxlc_log(NXLC_ERROR, "nixlSerDes::addBuf: bad arguments (tag '" + tag + "')");
        return NIXL_ERR_INVALID_PARAM;
    }
    workingStr.append(tag);
    workingStr.push_back('\0');
    put_u64(workingStr, static_cast<uint64_t>(len));
    workingStr.append(static_cast<const char *>(buf), static_cast<size_t>(len));
    return NIXL_SUCCESS;
}

/* Finds the record at the read offset with @p tag: its payload offset and length. */
static bool next_record(const std::string &s, ssize_t off, const std::string &tag,
                        size_t &payload, size_t &len) {
    if (off < 0 || static_cast<size_t>(off) > s.size())
        return false;
    size_t o = static_cast<size_t>(off);
    if (s.size() - o < tag.size() + 9 || s.compare(o, tag.size(), tag) != 0 ||
        s[o + tag.size()] != '\0')
        return false;
    uint64_t l = get_u64(s.data() + o + tag.size() + 1);
    payload = o + tag.size() + 9;
    if (l > s.size() - payload)
        return false;
    len = static_cast<size_t>(l);
    return true;
}

std::string nixlSerDes::getStr(const std::string &tag) {
    size_t p, l;
    if (!next_record(workingStr, des_offset, tag, p, l)) {
        nxlc_log(NXLC_ERROR, "nixlSerDes::getStr: no record '" + tag + "' at this position");
        return "";
    }
    des_offset = static_cast<ssize_t>(p + l);
    return workingStr.substr(p, l);
}

ssize_t nixlSerDes::getBufLen(const std::string &tag) const {
    size_t p, l;
    if (!next_record(workingStr, des_offset, tag, p, l)) {
        nxlc_log(NXLC_ERROR, "nixlSerDes::getBufLen: no record '" + tag + "' at this position");
        return -1;
    }
    return static_cast<ssize_t>(l);
}

nixl_status_t nixlSerDes::getBuf(const std::string &tag, void *buf, ssize_t len) {
    size_t p, l;
    if (!next_record(workingStr, des_offset, tag, p, l) || len < 0 ||
        static_cast<size_t>(len) != l || (l > 0 && !buf)) {
        nxlc_log(NXLC_ERROR, "nixlSerDes::getBuf: no record '" + tag +
                                 "' of that length at this position");
        return NIXL_ERR_MISMATCH;
    }
    if (l)
        std::memcpy(buf, workingStr.data() + p, l);
    des_offset = static_cast<ssize_t>(p + l);
    return NIXL_SUCCESS;
}

std::string nixlSerDes::exportStr() const { return workingStr; }

nixl_status_t nixlSerDes::importStr(const std::string &sdbuf) {
    workingStr = sdbuf;
    des_offset = 0;
    mode = DESERIALIZE;
    return NIXL_SUCCESS;
}

std::string nixlSerDes::_bytesToString(const void *buf, ssize_t size) {
    if (!buf || size <= 0)
        return std::string();
    return std::string(static_cast<const char *>(buf), static_cast<size_t>(size));
}

void nixlSerDes::_stringToBytes(void *fill_buf, const std::string &s, ssize_t size) {
    if (!fill_buf || size <= 0)
        return;
    size_t n = std::min(static_cast<size_t>(size), s.size());
    std::memcpy(fill_buf, s.data(), n);
}

/* ------------------------------------------------------------ descriptors */

static constexpr size_t basic_wire = 24; /* addr, len, devId: 8 bytes each, little-endian */

static void put_basic(std::string &s, const nixlBasicDesc &d) {
    put_u64(s, static_cast<uint64_t>(d.addr));
    put_u64(s, static_cast<uint64_t>(d.len));
    put_u64(s, d.devId);
}

static bool get_basic(const std::string &s, nixlBasicDesc &d) {
    if (s.size() < basic_wire)
        return false;
    d.addr = static_cast<uintptr_t>(get_u64(s.data()));
    d.len = static_cast<size_t>(get_u64(s.data() + 8));
    d.devId = get_u64(s.data() + 16);
    return true;
}

nixlBasicDesc::nixlBasicDesc(const uintptr_t &a, const size_t &l, const uint64_t &dev)
    : addr(a), len(l), devId(dev) {}

nixlBasicDesc::nixlBasicDesc(const nixl_blob_t &str) {
    if (str.size() != basic_wire || !get_basic(str, *this)) {
        nxlc_log(NXLC_ERROR, "nixlBasicDesc: not a serialized descriptor (" +
                                 std::to_string(str.size()) + " bytes)");
        addr = 0;
        len = 0;
        devId = 0;
    }
}

bool operator==(const nixlBasicDesc &lhs, const nixlBasicDesc &rhs) {
    return lhs.addr == rhs.addr && lhs.len == rhs.len && lhs.devId == rhs.devId;
}

bool operator!=(const nixlBasicDesc &lhs, const nixlBasicDesc &rhs) { return !(lhs == rhs); }

bool nixlBasicDesc::overlaps(const nixlBasicDesc &q) const {
    if (devId != q.devId)
        return false;
    return addr < q.addr + q.len && q.addr < addr + len;
}

nixl_blob_t nixlBasicDesc::serialize() const {
    std::string s;
    put_basic(s, *this);
    return s;
}

void nixlBasicDesc::print(const std::string &suffix) const {
    std::cout << "Desc (0x" << std::hex << addr << std::dec << ", " << len << ") from dev "
              << devId << " " << suffix << std::endl;
}

nixlBlobDesc::nixlBlobDesc(const uintptr_t &a, const size_t &l, const uint64_t &dev,
                           const nixl_blob_t &meta)
    : nixlBasicDesc(a, l, dev), metaInfo(meta) {}

nixlBlobDesc::nixlBlobDesc(const nixlBasicDesc &desc, const nixl_blob_t &meta)
    : nixlBasicDesc(desc), metaInfo(meta) {}

nixlBlobDesc::nixlBlobDesc(const nixl_blob_t &str) {
    if (!get_basic(str, *this)) {
        nxlc_log(NXLC_ERROR, "nixlBlobDesc: not a serialized descriptor (" +
                                 std::to_string(str.size()) + " bytes)");
        return;
    }
    metaInfo = str.substr(basic_wire);
}

bool operator==(const nixlBlobDesc &lhs, const nixlBlobDesc &rhs) {
    return static_cast<const nixlBasicDesc &>(lhs) == static_cast<const nixlBasicDesc &>(rhs) &&
           lhs.metaInfo == rhs.metaInfo;
}

nixl_blob_t nixlBlobDesc::serialize() const { return nixlBasicDesc::serialize() + metaInfo; }

void nixlBlobDesc::print(const std::string &suffix) const {
    nixlBasicDesc::print(", metadata of " + std::to_string(metaInfo.size()) + " bytes " + suffix);
}

nixlRemoteDesc::nixlRemoteDesc(const uintptr_t a, const size_t l, const uint64_t dev,
                               const std::string &remote_agent)
    : nixlBasicDesc(a, l, dev), remoteAgent(remote_agent) {}

nixlRemoteDesc::nixlRemoteDesc(const nixlBasicDesc &desc, const std::string &remote_agent)
    : nixlBasicDesc(desc), remoteAgent(remote_agent) {}

nixlRemoteDesc::nixlRemoteDesc(const nixl_blob_t &str) {
    if (!get_basic(str, *this)) {
        nxlc_log(NXLC_ERROR, "nixlRemoteDesc: not a serialized descriptor (" +
                                 std::to_string(str.size()) + " bytes)");
        return;
    }
    remoteAgent = str.substr(basic_wire);
}

nixl_blob_t nixlRemoteDesc::serialize() const { return nixlBasicDesc::serialize() + remoteAgent; }

bool operator==(const nixlRemoteDesc &lhs, const nixlRemoteDesc &rhs) {
    return static_cast<const nixlBasicDesc &>(lhs) == static_cast<const nixlBasicDesc &>(rhs) &&
           lhs.remoteAgent == rhs.remoteAgent;
}

/* ----------------------------------------------------------------- lists */

template<class T> static const char *list_kind() {
    if constexpr (std::is_same<T, nixlBasicDesc>::value)
        return "nxl-basic";
    else if constexpr (std::is_same<T, nixlBlobDesc>::value)
        return "nxl-blob";
    else
        return "nxl-remote";
}

template<class T> nixlDescList<T>::nixlDescList(const nixl_mem_t &t, const int &init_size) {
    static_assert(std::is_base_of<nixlBasicDesc, T>::value, "descriptors derive nixlBasicDesc");
    type = t;
    if (init_size > 0)
        descs.resize(static_cast<size_t>(init_size));
}

template<class T> nixlDescList<T>::nixlDescList(nixlSerDes *d) : type(DRAM_SEG) {
    if (!d) {
        nxlc_log(NXLC_ERROR, "nixlDescList: NULL deserializer");
        return;
    }
    std::string kind = d->getStr("nixlDList");
    if (kind != list_kind<T>()) {
        nxlc_log(NXLC_ERROR, "nixlDescList: the serialized list is not a list of this kind ('" +
                                 kind + "', expected '" + list_kind<T>() + "')");
        return;
    }
    uint64_t t = 0, n = 0;
    if (d->getBuf("t", &t, sizeof t) != NIXL_SUCCESS || t > FILE_SEG ||
        d->getBuf("n", &n, sizeof n) != NIXL_SUCCESS) {
        nxlc_log(NXLC_ERROR, "nixlDescList: malformed serialized list header");
        return;
    }
    std::vector<T> got;
    for (uint64_t i = 0; i < n; i++) {
        ssize_t l = d->getBufLen("d");
        if (l < static_cast<ssize_t>(basic_wire)) {
            nxlc_log(NXLC_ERROR, "nixlDescList: serialized list cut short at descriptor " +
                                     std::to_string(i) + " of " + std::to_string(n));
            return;
        }
        got.emplace_back(d->getStr("d"));
    }
    type = static_cast<nixl_mem_t>(t);
    descs = std::move(got);
}

template<class T> void nixlDescList<T>::resize(const size_t &count) { descs.resize(count); }

template<class T> void nixlDescList<T>::addDesc(const T &desc) { descs.push_back(desc); }

template<class T> void nixlDescList<T>::remDesc(const int &index) {
    if (index < 0 || static_cast<size_t>(index) >= descs.size())
        throw std::out_of_range("nixlDescList::remDesc: index " + std::to_string(index) +
                                " outside a list of " + std::to_string(descs.size()));
    descs.erase(descs.begin() + index);
}

template<class T> nixlDescList<nixlBasicDesc> nixlDescList<T>::trim() const {
    nixlDescList<nixlBasicDesc> out(type);
    out.reserve(descs.size());
    for (const T &d : descs)
        out.addDesc(static_cast<const nixlBasicDesc &>(d));
    return out;
}

template<class T> int nixlDescList<T>::getIndex(const nixlBasicDesc &query) const {
    for (size_t i = 0; i < descs.size(); i++)
        if (static_cast<const nixlBasicDesc &>(descs[i]) == query)
            return static_cast<int>(i);
    return NIXL_ERR_NOT_FOUND;
}

template<class T> nixl_status_t nixlDescList<T>::serialize(nixlSerDes *s) const {
    if (!s) {
        nxlc_log(NXLC_ERROR, "nixlDescList::serialize: NULL serializer");
        return NIXL_ERR_INVALID_PARAM;
    }
    uint64_t t = static_cast<uint64_t>(type), n = descs.size();
    nixl_status_t st = s->addStr("nixlDList", list_kind<T>());
    if (st == NIXL_SUCCESS)
        st = s->addBuf("t", &t, sizeof t);
    if (st == NIXL_SUCCESS)
        st = s->addBuf("n", &n, sizeof n);
    for (size_t i = 0; st == NIXL_SUCCESS && i < descs.size(); i++)
        st = s->addStr("d", descs[i].serialize());
    return st;
}

template<class T> std::string nixlDescList<T>::to_string(bool compact) const {
    std::ostringstream o;
    o << "DescList of mem type " << nixlEnumStrings::memTypeStr(type);
    if (compact) {
        std::unordered_map<size_t, size_t> by_len;
        for (const T &d : descs)
            by_len[d.len]++;
        o << " count=" << descs.size() << " content={";
        bool first = true;
        for (const auto &kv : by_len) {
            o << (first ? "" : ", ") << kv.first << ":" << kv.second;
            first = false;
        }
        o << "}";
    } else {
        for (const T &d : descs)
            o << "\n    (0x" << std::hex << d.addr << std::dec << ", " << d.len << ") dev "
              << d.devId;
    }
    return o.str();
}

template<class T> void nixlDescList<T>::print() const { std::cout << to_string() << std::endl; }

template class nixlDescList<nixlBasicDesc>;
template class nixlDescList<nixlBlobDesc>;
template class nixlDescList<nixlRemoteDesc>;
