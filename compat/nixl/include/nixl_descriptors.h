/* SPDX-License-Identifier: BSD-3-Clause */
/*
 * nxl's NIXL compatibility layer: descriptors and descriptor lists
 * (NIXL's nixlBasicDesc, nixlBlobDesc, nixlRemoteDesc, nixlDescList<T>).
 * A list's members are defined in libnxl-nixl for the three descriptor
 * types only.
 */
#ifndef _NIXL_DESCRIPTORS_H
#define _NIXL_DESCRIPTORS_H

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "nixl_types.h"

/* An address range of one device (for files: an offset in the fd devId). */
class nixlBasicDesc {
public:
    uintptr_t addr = 0;
    size_t len = 0;
    uint64_t devId = 0;

    nixlBasicDesc() {}
    nixlBasicDesc(const uintptr_t &addr, const size_t &len, const uint64_t &dev_id);
    /* Reads what serialize() wrote; a malformed string gives an empty descriptor. */
    nixlBasicDesc(const nixl_blob_t &str);
    nixlBasicDesc(const nixlBasicDesc &desc) = default;
    nixlBasicDesc &operator=(const nixlBasicDesc &desc) = default;
    ~nixlBasicDesc() = default;

    bool operator<(const nixlBasicDesc &o) const noexcept {
        if (devId != o.devId)
            return devId < o.devId;
        if (addr != o.addr)
            return addr < o.addr;
        return len < o.len;
    }

    friend bool operator==(const nixlBasicDesc &lhs, const nixlBasicDesc &rhs);
    friend bool operator!=(const nixlBasicDesc &lhs, const nixlBasicDesc &rhs);

    /* true when query lies inside this range, on the same device. */
    bool covers(const nixlBasicDesc &query) const noexcept {
        return devId == query.devId && addr <= query.addr &&
               addr + len >= query.addr + query.len;
    }
    bool overlaps(const nixlBasicDesc &query) const;

    nixl_blob_t serialize() const;
    void print(const std::string &suffix) const;
};

/* A descriptor with bytes for the backend (a path, an object key). */
class nixlBlobDesc : public nixlBasicDesc {
public:
    nixl_blob_t metaInfo;

    using nixlBasicDesc::nixlBasicDesc;

    nixlBlobDesc(const uintptr_t &addr, const size_t &len, const uint64_t &dev_id,
                 const nixl_blob_t &meta_info);
    nixlBlobDesc(const nixlBasicDesc &desc, const nixl_blob_t &meta_info);
    nixlBlobDesc(const nixl_blob_t &str);

    friend bool operator==(const nixlBlobDesc &lhs, const nixlBlobDesc &rhs);

    nixl_blob_t serialize() const;
    void print(const std::string &suffix) const;
};

/* A descriptor of another agent's memory. */
struct nixlRemoteDesc : public nixlBasicDesc {
    std::string remoteAgent;

    using nixlBasicDesc::nixlBasicDesc;

    nixlRemoteDesc(const uintptr_t addr, const size_t len, const uint64_t dev_id,
                   const std::string &remote_agent);
    nixlRemoteDesc(const nixlBasicDesc &desc, const std::string &remote_agent);
    explicit nixlRemoteDesc(const nixl_blob_t &str);

    nixl_blob_t serialize() const;
};

bool operator==(const nixlRemoteDesc &lhs, const nixlRemoteDesc &rhs);

/* A list of descriptors of one memory type. */
template<class T> class nixlDescList {
protected:
    nixl_mem_t type;
    std::vector<T> descs;

public:
    nixlDescList(const nixl_mem_t &type, const int &init_size = 0);
    /* Reads a list that serialize() wrote; on malformed input the list is empty. */
    nixlDescList(nixlSerDes *deserializer);
    nixlDescList(const nixlDescList<T> &d_list) = default;
    nixlDescList &operator=(const nixlDescList<T> &d_list) = default;
    virtual ~nixlDescList() = default;

    inline nixl_mem_t getType() const { return type; }
    inline int descCount() const { return static_cast<int>(descs.size()); }
    bool isEmpty() const noexcept { return descs.empty(); }

    const T &operator[](size_t index) const { return descs[index]; }
    T &operator[](size_t index) { return descs[index]; }

    inline typename std::vector<T>::const_iterator begin() const { return descs.begin(); }
    inline typename std::vector<T>::const_iterator end() const { return descs.end(); }
    inline typename std::vector<T>::iterator begin() { return descs.begin(); }
    inline typename std::vector<T>::iterator end() { return descs.end(); }

    template<class Y>
    friend bool operator==(const nixlDescList<Y> &lhs, const nixlDescList<Y> &rhs);

    virtual void resize(const size_t &count);
    inline void reserve(size_t count) { descs.reserve(count); }
    inline void clear() { descs.clear(); }
    virtual void addDesc(const T &desc);

    template<class... Args> T &emplace(Args &&...args) {
        return descs.emplace_back(std::forward<Args>(args)...);
    }

    /* Removes the descriptor at index; throws std::out_of_range outside the list, as NIXL. */
    void remDesc(const int &index);
    /* The same ranges without per-descriptor extras. */
    nixlDescList<nixlBasicDesc> trim() const;
    /* Index of the descriptor equal to query, or NIXL_ERR_NOT_FOUND. */
    virtual int getIndex(const nixlBasicDesc &query) const;

    nixl_status_t serialize(nixlSerDes *serializer) const;
    void print() const;
    std::string to_string(bool compact = false) const;
};

template<class Y> bool operator==(const nixlDescList<Y> &lhs, const nixlDescList<Y> &rhs) {
    if (lhs.type != rhs.type || lhs.descs.size() != rhs.descs.size())
        return false;
    for (size_t i = 0; i < lhs.descs.size(); i++)
        if (!(lhs.descs[i] == rhs.descs[i]))
            return false;
    return true;
}

using nixl_xfer_dlist_t = nixlDescList<nixlBasicDesc>;
using nixl_reg_dlist_t = nixlDescList<nixlBlobDesc>;
using nixl_remote_dlist_t = nixlDescList<nixlRemoteDesc>;
using nixl_local_dlist_t = nixlDescList<nixlBasicDesc>;

#endif
